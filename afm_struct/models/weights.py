"""How an mlx-lm directory's weights are held in memory: chosen per backend and per source.

Measured on the CPU backend (benchmarks/models/README.md, qwen3 hidden 512, 8 layers): fp32
with an optimized BLAS decodes ~2x faster than bf16 and 6-8x faster than MLX's 4-bit affine
kernels, so ``auto`` dequantizes to fp32 there when the fp32 copy fits in memory with a margin;
on GPUs (Metal, CUDA) the quantized kernels read less memory and win, so weights stay as stored.
``--weights float32`` really dequantizes (quantized layers become dense ``nn.Linear`` /
``nn.Embedding`` / ``SwitchLinear``), not only casts their scales.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten

# The fp32 copy may take at most this share of the memory available at load: the rest is for
# the KV caches, the grammar engine and whatever else the machine runs.
FIT_SHARE = 0.5


@dataclass(frozen=True)
class WeightChoice:
    """The representation chosen (``float32``, ``float16``, ``bfloat16`` or ``as-stored``), what the
    directory stores (``bfloat16``, ``4-bit affine``...) and why, for the load log and ``/v1/models``."""

    weights: str
    stored: str
    reason: str


def _quantized_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    from mlx_lm.models.switch_layers import QuantizedSwitchLinear

    kinds = (nn.QuantizedLinear, nn.QuantizedEmbedding, QuantizedSwitchLinear)
    return [(path, m) for path, m in model.named_modules() if isinstance(m, kinds)]


def stored_format(model: nn.Module) -> str:
    """What the loaded weights are: ``4-bit affine`` (the quantized layers' bits and mode; mixed
    bit widths listed), else the floating dtype most parameters have."""
    quantized = _quantized_modules(model)
    if quantized:
        kinds = sorted({f"{m.bits}-bit {m.mode}" for _, m in quantized})
        return "/".join(kinds)
    sizes: dict[str, int] = {}
    for _, v in tree_flatten(model.parameters()):
        if mx.issubdtype(v.dtype, mx.floating):
            name = str(v.dtype).removeprefix("mlx.core.")
            sizes[name] = sizes.get(name, 0) + v.size
    return max(sizes, key=lambda k: sizes[k]) if sizes else "float32"


def float32_bytes(model: nn.Module) -> int:
    """Bytes the model takes once every weight is dense fp32 (quantized layers counted at their
    logical shape, not their packed one)."""
    bits = {path: m.bits for path, m in _quantized_modules(model)}
    total = 0
    for name, value in tree_flatten(model.parameters()):
        owner, _, leaf = name.rpartition(".")
        if owner in bits:
            if leaf == "weight":
                total += value.size * (32 // bits[owner]) * 4
            elif leaf == "bias":
                total += value.size * 4
            continue  # scales and biases vanish once dequantized
        total += value.size * 4
    return total


def available_memory() -> int | None:
    """Bytes of memory available now (Linux ``MemAvailable``; elsewhere the physical memory),
    or None when the system will not say."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError, AttributeError):
        return None


def choose(mode: str, model: nn.Module, device: str, available: int | None) -> WeightChoice:
    """The representation for an mlx-lm ``model`` as loaded (stored weights) on ``device``
    (``cpu`` or ``gpu (...)``), given ``available`` bytes of memory; ``mode`` is ``--weights``."""
    stored = stored_format(model)
    if mode == "quantized":
        return WeightChoice("as-stored", stored, "--weights quantized keeps the stored weights")
    if mode != "auto":
        return WeightChoice(mode, stored, f"--weights {mode}")
    if device != "cpu":
        return WeightChoice("as-stored", stored,
                            f"{device}: stored weights are fastest (less memory to read)")
    if stored == "float32":
        return WeightChoice("float32", stored, "cpu: stored as fp32 already")
    need = float32_bytes(model)
    if available is None or need > FIT_SHARE * available:
        have = "unknown" if available is None else f"{available / 1e9:.1f} GB"
        return WeightChoice("as-stored", stored,
                            f"cpu: fp32 would be faster but needs {need / 1e9:.1f} GB, more than "
                            f"{FIT_SHARE:.0%} of the memory available ({have}); kept as stored")
    return WeightChoice("float32", stored,
                        f"cpu: fp32 with an optimized BLAS decodes fastest ({need / 1e9:.2f} GB "
                        "fits in memory)")


def dequantize(model: nn.Module, dtype: mx.Dtype = mx.float32) -> int:
    """Replace every quantized layer of ``model`` by its dense ``dtype`` equivalent (the weights
    ``mx.dequantize`` gives); returns how many layers were replaced."""
    from mlx_lm.models.switch_layers import QuantizedSwitchLinear, SwitchLinear

    replaced = []
    for path, q in _quantized_modules(model):
        # In fp32 whatever the scales' dtype: bf16 scales would round every weight to bf16
        # (mxfp4's scales are E8M0 bytes, kept).
        scales, biases = q.scales, q.get("biases")
        if mx.issubdtype(scales.dtype, mx.floating):
            scales = scales.astype(mx.float32)
            biases = None if biases is None else biases.astype(mx.float32)
        w = mx.dequantize(q.weight, scales, biases, q.group_size, q.bits, mode=q.mode).astype(dtype)
        has_bias = "bias" in q
        if isinstance(q, nn.QuantizedEmbedding):
            dense: nn.Module = nn.Embedding(w.shape[0], w.shape[1])
        elif isinstance(q, QuantizedSwitchLinear):
            dense = SwitchLinear(w.shape[2], w.shape[1], w.shape[0], bias=has_bias)
        else:
            dense = nn.Linear(w.shape[1], w.shape[0], bias=has_bias)
        dense.weight = w
        if has_bias:
            dense.bias = q["bias"].astype(dtype)
        mx.eval(dense.parameters())  # one layer at a time: the packed copy can go at once
        replaced.append((path, dense))
    if replaced:
        model.update_modules(tree_unflatten(replaced))
    return len(replaced)


def cast_for_cpu(model: nn.Module) -> list[str]:
    """Cast what the CPU backend cannot run in the stored dtype: MLX's CPU ``gather_mm`` (the
    dense mixture-of-experts layers, ``SwitchLinear``) takes only float32, so a bf16 gpt-oss would
    fail on its first request.  Returns the kinds of layers cast (empty when none)."""
    from mlx_lm.models.switch_layers import SwitchLinear

    cast = [m for _, m in model.named_modules()
            if isinstance(m, SwitchLinear) and m.weight.dtype != mx.float32]
    for m in cast:
        m.set_dtype(mx.float32)
    return ["SwitchLinear (gather_mm is float32-only on the CPU)"] if cast else []
