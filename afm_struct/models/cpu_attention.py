"""Scaled dot-product attention for the CPU device, with a softmax MLX can run fast there.

``mx.fast.scaled_dot_product_attention`` has no kernel of its own on the CPU: it falls back to
matmul, softmax, matmul, and MLX's CPU ``exp`` runs one float at a time (~17 ns per element on
the 2-core reference machine, ~80x an add).  In a decode step of 8 sequences that softmax is
most of the attention cost (~0.47 ms per layer, 30 layers).  Here the exponential is a range
reduction plus a degree-6 polynomial made of elementwise ops, which ``mx.compile`` fuses into
one kernel (max relative error 2e-7: float32 precision), and grouped-query heads share their
key/value head without repeating it.

Only between two sizes (see ``MIN_SCORES``/``MAX_SCORES``): a batch of decode rows, a
fast-forward run, a prefill chunk; a single decode row, very long prefills, quantized caches
and other devices keep mlx-lm's path.  ``AFM_STRUCT_CPU_ATTENTION=0``
turns it off (to measure the difference).
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any

import mlx.core as mx

# Scores per call: below MIN the few exponentials cost less than this path's extra ops (one
# decode row over ~150 keys ran ~10% slower here), above MAX the materialized softmax would
# hold too much memory.
MIN_SCORES = 4096
MAX_SCORES = 4 * 1024 * 1024
_LOG2E = 1.4426950408889634
_LN2_HI, _LN2_LO = 0.693145751953125, 1.428606765330187e-06  # ln 2 split (Cody-Waite)
_MASKED = -1e30


def _exp_parts_impl(x: mx.array) -> tuple[mx.array, mx.array]:
    """``exp(x) = p * 2**k`` for ``x <= 0``: the polynomial ``p`` and the bits of ``2**k``."""
    x = mx.maximum(x, -87.0)  # exp(-87) ~ 1.6e-38: nothing next to a row's largest term (1)
    k = mx.floor(x * _LOG2E + 0.5)
    r = x - k * _LN2_HI - k * _LN2_LO
    p = 1.9875691500e-4 * r + 1.3981999507e-3
    p = p * r + 8.3334519073e-3
    p = p * r + 4.1665795894e-2
    p = p * r + 1.6666665459e-1
    p = p * r + 5.0000001201e-1
    p = p * r * r + r + 1.0
    return p, (k.astype(mx.int32) + 127) << 23


_exp_parts_compiled = partial(mx.compile, shapeless=True)(_exp_parts_impl)
_compiled_ok: bool | None = None


def _exp_parts(x: mx.array) -> tuple[mx.array, mx.array]:
    global _compiled_ok
    if _compiled_ok is None:
        try:  # compiling for the CPU needs a C++ compiler at run time: fall back without one
            mx.eval(_exp_parts_compiled(mx.zeros((2,))))
            _compiled_ok = True
        except Exception:  # pragma: no cover - depends on the machine's toolchain
            _compiled_ok = False
    return _exp_parts_compiled(x) if _compiled_ok else _exp_parts_impl(x)


def exp_nonpositive(x: mx.array) -> mx.array:
    """``exp(x)`` for ``x <= 0`` (below -87 it returns exp(-87) instead of a denormal or 0)."""
    p, bits = _exp_parts(x)
    # The bit view stays outside the compiled function: shapeless compilation cannot infer it.
    return p * bits.view(mx.float32)


def attention(queries: mx.array, keys: mx.array, values: mx.array, scale: float,
              mask: Any = None) -> mx.array:
    """Same as ``mx.fast.scaled_dot_product_attention`` (``mask``: None, ``"causal"``, a boolean
    array, True where a query sees a key, or an additive array), for ``(B, H, L, D)`` inputs
    whose key/value heads divide the query heads."""
    b, hq, lq, d = queries.shape
    hk, lk = keys.shape[1], keys.shape[2]
    group = hq // hk
    # Query heads h*group .. h*group+group-1 read key/value head h (mlx-lm's head layout).
    scores = (queries * scale).reshape(b, hk, group * lq, d) @ keys.swapaxes(-1, -2)
    if mask is not None:
        scores = scores.reshape(b, hk, group, lq, lk)
        if isinstance(mask, str):  # "causal", aligned to the last key
            mask = mx.arange(lk)[None] <= mx.arange(lq)[:, None] + (lk - lq)
        elif mask.ndim == 4:
            mask = mask[:, :, None] if mask.shape[1] == 1 else mask.reshape(mask.shape[0], hk, group, lq, lk)
        if mask.dtype == mx.bool_:
            scores = mx.where(mask, scores, _MASKED)
        else:
            scores = scores + mask
        scores = scores.reshape(b, hk, group * lq, lk)
    weights = exp_nonpositive(scores - scores.max(axis=-1, keepdims=True))
    weights = weights / weights.sum(axis=-1, keepdims=True)
    return (weights @ values).reshape(b, hq, lq, d)


def wanted() -> bool:
    """Whether this attention runs here: on the CPU device, unless turned off."""
    if os.environ.get("AFM_STRUCT_CPU_ATTENTION", "1") == "0":
        return False
    return mx.default_device().type == mx.cpu


def scaled_dot_product_attention(queries: mx.array, keys: mx.array, values: mx.array, *, cache: Any,
                                 scale: float, mask: Any, enabled: bool) -> mx.array:
    """mlx-lm's attention entry point, routed to :func:`attention` when ``enabled`` and the
    step is small enough; otherwise mlx-lm's own."""
    b, hq, lq, _ = queries.shape
    hk, lk = keys.shape[1], keys.shape[2]
    if (enabled and not hasattr(cache, "bits") and hq % hk == 0
            and MIN_SCORES <= b * hq * lq * lk <= MAX_SCORES):
        return attention(queries, keys, values, scale, mask)
    from mlx_lm.models.base import scaled_dot_product_attention as mlx_lm_sdpa

    return mlx_lm_sdpa(queries, keys, values, cache=cache, scale=scale, mask=mask)
