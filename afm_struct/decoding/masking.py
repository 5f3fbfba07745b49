"""Apply a grammar bitmask to logits with portable MLX ops (CPU, CUDA and Metal alike)."""

from __future__ import annotations

from collections.abc import Iterable

import mlx.core as mx
import numpy as np

# The int32 bit pattern of float32 -inf.
_NEG_INF_BITS = int(np.array(0xFF800000, dtype=np.uint32).view(np.int32))


def bitmask_allows_all(row: np.ndarray, vocab_size: int) -> bool:
    """True when every token below ``vocab_size`` is allowed (the apply step can be skipped)."""
    full, rem = divmod(vocab_size, 32)
    if full and row[0] != -1:  # most constrained masks: decided by the first word
        return False
    if not (row[:full] == -1).all():
        return False
    return rem == 0 or (int(row[full]) & ((1 << rem) - 1)) == (1 << rem) - 1


def allows_most(row: np.ndarray, vocab_size: int) -> bool:
    """True when the row allows more than half of the vocabulary: free text, where a grammar
    excludes only special tokens and stray bytes, as opposed to a structure it constrains."""
    return allowed_count(row) * 2 > vocab_size


def _halves(row: np.ndarray) -> tuple[np.ndarray, int]:
    """``row``'s words as uint64 pairs (a 2x shorter pass for numpy) and the odd last word
    (0 if none); a strided row as its uint32 words (nothing left over)."""
    if not row.flags.c_contiguous:
        return np.ascontiguousarray(row).view(np.uint32), 0
    even = row.shape[0] & ~1
    return row[:even].view(np.uint64), int(row[even]) & 0xFFFFFFFF if even < row.shape[0] else 0


def allowed_count(row: np.ndarray) -> int:
    """How many bits of one bitmask row are set."""
    # A popcount of the words: unpacking the bits first cost ~10x (~0.3 ms a row at 128k).
    pairs, last = _halves(row)
    return int(np.bitwise_count(pairs).sum()) + last.bit_count()


def allowed_tokens(row: np.ndarray) -> np.ndarray:
    """The token ids whose bits are set in one bitmask row, ascending (int64)."""
    pairs, last = _halves(row)
    width = pairs.dtype.itemsize * 8
    # A structural mask: a few nonzero words, unpacked alone.  Both passes on boolean arrays:
    # numpy's nonzero takes several times as long on integer ones.
    words = np.flatnonzero(pairs != 0)
    bits = np.flatnonzero(np.unpackbits(pairs[words].view(np.uint8), bitorder="little").view(bool))
    tokens = words[bits // width] * width + bits % width
    if last:
        base = (row.shape[0] - 1) * 32
        tail = [base + b for b in range(32) if last >> b & 1]
        tokens = np.concatenate([tokens, np.asarray(tail, dtype=np.int64)])
    return tokens


def allows_token(row: np.ndarray, token: int) -> bool:
    """True when bit ``token`` of one bitmask row is set (a token past the row is banned)."""
    word = token >> 5
    return word < row.shape[0] and bool((int(row[word]) >> (token & 31)) & 1)


def set_tokens(row: np.ndarray, tokens: Iterable[int], allowed: bool) -> None:
    """Set or clear the bits of ``tokens`` in one bitmask row (in place)."""
    words = row.view(np.uint32)  # Python ints on an unsigned view: no sign juggling per bit
    n = words.shape[0]
    for t in tokens:
        word, bit = divmod(int(t), 32)
        if word >= n:
            continue
        value = int(words[word])
        words[word] = value | (1 << bit) if allowed else value & ~(1 << bit)


def apply_bitmask(logits: mx.array, bitmask: np.ndarray) -> mx.array:
    """``logits`` (B, V) with disallowed tokens set to -inf; ``bitmask`` is (B, ceil(V/32)) int32.

    Tokens past the mask (a model vocabulary padded beyond the tokenizer's) are disallowed.
    One vectorised application for the whole batch: on a GPU, on the device
    (:func:`apply_on_device`); on the CPU, unpacked by numpy (:func:`apply_on_host`), which
    measured faster there on real masks (mostly zeros: 32 x 128k, 6.7 ms CPU against 8.2;
    64 x 151k, 36 against 60).
    """
    if mx.default_device().type == mx.DeviceType.gpu:
        return apply_on_device(logits, bitmask)
    return apply_on_host(logits, bitmask)


def apply_on_host(logits: mx.array, bitmask: np.ndarray) -> mx.array:
    """:func:`apply_bitmask` with the bits unpacked on the host into one boolean (B, V) upload
    and a ``where``."""
    # No MLX constants shared across threads (MLX streams are per thread).
    words = np.ascontiguousarray(np.asarray(bitmask, dtype=np.int32))
    # unpackbits gives 0 and 1 bytes, already valid booleans: a view, where ``astype(bool)``
    # cost a pass over every byte (3.6 ms of CPU for 32 x 128k, the unpacking itself 0.17).
    unpacked = np.unpackbits(words.view(np.uint8), axis=-1, bitorder="little").view(np.bool_)
    vocab = logits.shape[-1]
    width = unpacked.shape[-1]
    if width < vocab:
        unpacked = np.pad(unpacked, ((0, 0), (0, vocab - width)))
    allowed = mx.array(unpacked[:, :vocab])
    return mx.where(allowed, logits, mx.array(float("-inf"), dtype=logits.dtype))


def apply_on_device(logits: mx.array, bitmask: np.ndarray) -> mx.array:
    """:func:`apply_bitmask` on the logits' device: the packed words go up (V/8 bytes a row,
    not V booleans) and are unpacked there into an additive bias of exactly 0 or -inf (adding
    keeps every allowed logit bit for bit)."""
    words = mx.array(np.ascontiguousarray(bitmask, dtype=np.int32))
    rows, vocab = words.shape[0], logits.shape[-1]
    # Built per call: MLX arrays are not shared across threads (streams are per thread).
    shifts = mx.arange(32, dtype=mx.int32)
    bits = ((words[:, :, None] >> shifts) & 1).reshape(rows, -1)
    width = bits.shape[-1]
    if width < vocab:
        bits = mx.concatenate([bits, mx.zeros((rows, vocab - width), dtype=mx.int32)], axis=1)
    elif width > vocab:
        bits = bits[:, :vocab]
    # bit 1 -> 0x00000000 (0.0), bit 0 -> 0xFF800000 (-inf): (bit - 1) & the -inf pattern.
    bias = ((bits - 1) & _NEG_INF_BITS).view(mx.float32)
    if logits.dtype != mx.float32:
        bias = bias.astype(logits.dtype)  # 0 and -inf are exact in every float type
    return logits + bias
