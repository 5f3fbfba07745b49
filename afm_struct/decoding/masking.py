"""Apply a grammar bitmask to logits with portable MLX ops (CPU, CUDA and Metal alike)."""

from __future__ import annotations

from collections.abc import Iterable

import mlx.core as mx
import numpy as np


def bitmask_allows_all(row: np.ndarray, vocab_size: int) -> bool:
    """True when every token below ``vocab_size`` is allowed (the apply step can be skipped)."""
    full, rem = divmod(vocab_size, 32)
    if not (row[:full] == -1).all():
        return False
    return rem == 0 or (int(row[full]) & ((1 << rem) - 1)) == (1 << rem) - 1


def allows_most(row: np.ndarray, vocab_size: int) -> bool:
    """True when the row allows more than half of the vocabulary: free text, where a grammar
    excludes only special tokens and stray bytes, as opposed to a structure it constrains."""
    return int(np.unpackbits(row.view(np.uint8)).sum()) * 2 > vocab_size


def set_tokens(row: np.ndarray, tokens: Iterable[int], allowed: bool) -> None:
    """Set or clear the bits of ``tokens`` in one bitmask row (in place)."""
    for t in tokens:
        word, bit = divmod(int(t), 32)
        if word >= row.shape[0]:
            continue
        value = np.uint32(row[word].view(np.uint32))
        value = value | np.uint32(1 << bit) if allowed else value & ~np.uint32(1 << bit)
        row[word] = np.array(value, dtype=np.uint32).view(np.int32)


def apply_bitmask(logits: mx.array, bitmask: np.ndarray) -> mx.array:
    """``logits`` (B, V) with disallowed tokens set to -inf; ``bitmask`` is (B, ceil(V/32)) int32.

    Tokens past the mask (a model vocabulary padded beyond the tokenizer's) are disallowed.
    """
    # Unpacked on the host: no MLX constants shared across threads (MLX streams are per
    # thread) and a single upload of the boolean row per step.
    words = np.ascontiguousarray(np.asarray(bitmask, dtype=np.int32))
    unpacked = np.unpackbits(words.view(np.uint8), axis=-1, bitorder="little").astype(bool)
    vocab = logits.shape[-1]
    width = unpacked.shape[-1]
    if width < vocab:
        unpacked = np.pad(unpacked, ((0, 0), (0, vocab - width)))
    allowed = mx.array(unpacked[:, :vocab])
    return mx.where(allowed, logits, mx.array(float("-inf"), dtype=logits.dtype))
