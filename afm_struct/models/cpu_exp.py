"""The exponential as MLX runs it fast on the CPU, and the model ops built on it (SwiGLU here,
the attention softmax in ``cpu_attention``).

MLX's CPU ``exp`` (and ``sigmoid``, hence SiLU) runs one float at a time: ~17 ns per element
on the 2-core reference machine, ~80x an add.  A batched decode step evaluates ~12k SiLUs and
~11k softmax exponentials per layer, so on the CPU they were ~15% of an 8-row step.  Here
``exp`` is a Cody-Waite range reduction plus a degree-6 polynomial made of elementwise ops,
which ``mx.compile`` fuses into one kernel (max relative error 2e-7, float32 precision).

Below ``MIN_ELEMENTS`` the extra ops cost more than the exponentials they speed up (one decode
row), so small calls keep MLX's own ops.  Only on the CPU device; ``AFM_STRUCT_CPU_EXP=0``
turns it off (to measure the difference).
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any

import mlx.core as mx
from mlx_lm.models.activations import swiglu as mlx_lm_swiglu

MIN_ELEMENTS = 4096
_LOG2E = 1.4426950408889634
_LN2_HI, _LN2_LO = 0.693145751953125, 1.428606765330187e-06  # ln 2 split (Cody-Waite)


def _exp_parts_impl(x: mx.array) -> tuple[mx.array, mx.array]:
    """``exp(x) = p * 2**k``: the polynomial ``p`` and the float bits of ``2**k``."""
    # exp(-87) ~ 1.6e-38 stands in for smaller values; 88 is float32's largest power of e.
    x = mx.clip(x, -87.0, 88.0)
    k = mx.floor(x * _LOG2E + 0.5)
    r = x - k * _LN2_HI - k * _LN2_LO
    p = 1.9875691500e-4 * r + 1.3981999507e-3
    p = p * r + 8.3334519073e-3
    p = p * r + 4.1665795894e-2
    p = p * r + 1.6666665459e-1
    p = p * r + 5.0000001201e-1
    p = p * r * r + r + 1.0
    return p, (k.astype(mx.int32) + 127) << 23


@partial(mx.compile, shapeless=True)
def _swiglu_tail(gate: mx.array, x: mx.array, p: mx.array, two_k: mx.array) -> mx.array:
    return gate / (1.0 + p * two_k) * x


_exp_parts_compiled = partial(mx.compile, shapeless=True)(_exp_parts_impl)
_compiles: bool | None = None


def exp_parts(x: mx.array) -> tuple[mx.array, mx.array]:
    """``(p, 2**k)`` with ``exp(x) = p * 2**k`` (``x`` clipped to [-87, 88])."""
    global _compiles
    if _compiles is None:
        try:  # compiling for the CPU needs a C++ compiler at run time: fall back without one
            mx.eval(_exp_parts_compiled(mx.zeros((2,)))[0])
            _compiles = True
        except Exception:  # pragma: no cover - depends on the machine's toolchain
            _compiles = False
    p, bits = _exp_parts_compiled(x) if _compiles else _exp_parts_impl(x)
    # The bit view stays outside the compiled function: shapeless compilation cannot infer it.
    return p, bits.view(mx.float32)


def exp(x: mx.array) -> mx.array:
    """``exp(x)`` to float32 precision for x in [-87, 88] (clipped outside)."""
    p, two_k = exp_parts(x)
    return p * two_k


def swiglu(gate: mx.array, x: mx.array) -> mx.array:
    """``silu(gate) * x``, as mlx-lm's ``swiglu``."""
    if gate.size < MIN_ELEMENTS:
        return mlx_lm_swiglu(gate, x)
    p, two_k = exp_parts(-gate)
    if not _compiles:  # pragma: no cover - see exp_parts
        return gate / (1.0 + p * two_k) * x
    return _swiglu_tail(gate, x, p, two_k)


def wanted() -> bool:
    """Whether these ops replace MLX's here: on the CPU device, unless turned off."""
    if os.environ.get("AFM_STRUCT_CPU_EXP", "1") == "0":
        return False
    return mx.default_device().type == mx.cpu


_FAST_MLP: type | None = None


def use_fast_swiglu(model: Any) -> int:
    """Swap mlx-lm llama MLP layers for ones computing SwiGLU with :func:`swiglu`; returns how
    many layers now do (0 for models of other structures, which keep their own)."""
    try:
        from mlx_lm.models import llama
    except ImportError:  # pragma: no cover - mlx-lm is a dependency
        return 0
    global _FAST_MLP
    if _FAST_MLP is None:
        class FastSwiGLUMLP(llama.MLP):  # type: ignore[misc, name-defined]
            """mlx-lm's llama MLP with the SwiGLU of :func:`swiglu`."""

            def __call__(self, x: mx.array) -> mx.array:
                return self.down_proj(swiglu(self.gate_proj(x), self.up_proj(x)))

        _FAST_MLP = FastSwiGLUMLP
    swapped = 0
    for layer in getattr(getattr(model, "model", None), "layers", None) or []:
        mlp = getattr(layer, "mlp", None)
        if type(mlp) in (llama.MLP, _FAST_MLP):
            mlp.__class__ = _FAST_MLP
            swapped += 1
    return swapped
