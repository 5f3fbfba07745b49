"""Apply a grammar bitmask to logits with portable MLX ops (CPU, CUDA and Metal alike)."""

from __future__ import annotations

from collections.abc import Iterable

import mlx.core as mx
import numpy as np

_SHIFTS = mx.arange(32, dtype=mx.int32)


def bitmask_allows_all(row: np.ndarray, vocab_size: int) -> bool:
    """True when every token below ``vocab_size`` is allowed (the apply step can be skipped)."""
    full, rem = divmod(vocab_size, 32)
    if not (row[:full] == -1).all():
        return False
    return rem == 0 or (int(row[full]) & ((1 << rem) - 1)) == (1 << rem) - 1


def set_tokens(row: np.ndarray, tokens: Iterable[int], allowed: bool) -> None:
    """Set or clear the bits of ``tokens`` in one bitmask row (in place)."""
    for t in tokens:
        word, bit = divmod(int(t), 32)
        if word >= row.shape[0]:
            continue
        value = np.uint32(row[word].view(np.uint32))
        value = value | np.uint32(1 << bit) if allowed else value & ~np.uint32(1 << bit)
        row[word] = np.array(value, dtype=np.uint32).view(np.int32)


def apply_bitmask(logits: mx.array, bitmask: mx.array | np.ndarray) -> mx.array:
    """``logits`` (B, V) with disallowed tokens set to -inf; ``bitmask`` is (B, ceil(V/32)) int32.

    Tokens past the mask (a model vocabulary padded beyond the tokenizer's) are disallowed.
    """
    bits = mx.array(bitmask) if isinstance(bitmask, np.ndarray) else bitmask
    vocab = logits.shape[-1]
    allowed = ((bits[..., None] >> _SHIFTS) & 1).reshape(bits.shape[0], -1).astype(mx.bool_)
    width = allowed.shape[-1]
    if width < vocab:
        allowed = mx.concatenate(
            [allowed, mx.zeros((allowed.shape[0], vocab - width), dtype=mx.bool_)], axis=-1)
    elif width > vocab:
        allowed = allowed[:, :vocab]
    return mx.where(allowed, logits, mx.array(float("-inf"), dtype=logits.dtype))
