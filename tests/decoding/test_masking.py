"""Bitmask helpers and the portable mask application."""

from __future__ import annotations

import math
import threading

import mlx.core as mx
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from afm_struct.decoding.masking import (
    allowed_count,
    allowed_tokens,
    allows_most,
    allows_token,
    apply_bitmask,
    apply_on_device,
    apply_on_host,
    bitmask_allows_all,
    set_tokens,
)
from afm_struct.grammar.engines.protocol import allocate_bitmask

from .randomized import examples


def test_set_and_apply_round_trip():
    vocab = 70  # not a multiple of 32: the last word is partial
    mask = allocate_bitmask(2, vocab)
    set_tokens(mask[0], [0, 31, 32, 69], True)
    set_tokens(mask[1], range(vocab), True)
    set_tokens(mask[1], [5], False)
    out = apply_bitmask(mx.zeros((2, vocab)), mask)
    allowed0 = [i for i, v in enumerate(out[0].tolist()) if v != -math.inf]
    banned1 = [i for i, v in enumerate(out[1].tolist()) if v == -math.inf]
    assert allowed0 == [0, 31, 32, 69]
    assert banned1 == [5]


def test_bit_31_sign_bit_is_handled():
    mask = allocate_bitmask(1, 64)
    set_tokens(mask[0], [31, 63], True)
    assert mask[0, 0] < 0  # int32 view of bit 31
    out = apply_bitmask(mx.zeros((1, 64)), mask)
    assert [i for i, v in enumerate(out[0].tolist()) if v != -math.inf] == [31, 63]


def test_tokens_past_the_mask_are_banned():
    mask = np.full((1, 1), -1, dtype=np.int32)  # 32 tokens allowed
    out = apply_bitmask(mx.zeros((1, 40)), mask)
    assert out[0].tolist()[32:] == [-math.inf] * 8


def test_allows_all_detection():
    mask = allocate_bitmask(1, 70)
    set_tokens(mask[0], range(70), True)
    assert bitmask_allows_all(mask[0], 70)
    set_tokens(mask[0], [69], False)
    assert not bitmask_allows_all(mask[0], 70)


def test_apply_from_another_thread():
    # The scheduler thread applies masks; MLX streams are per thread.
    mask = allocate_bitmask(1, 64)
    set_tokens(mask[0], [3], True)
    result = {}

    def worker():
        result["argmax"] = int(mx.argmax(apply_bitmask(mx.arange(64).astype(mx.float32)[None], mask)).item())

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert result["argmax"] == 3


@settings(max_examples=examples(20), deadline=None)
@given(rows=st.integers(1, 5), vocab=st.integers(1, 200), extra_words=st.integers(-2, 2),
       seed=st.integers(0, 2**32 - 1), dtype=st.sampled_from(["float32", "bfloat16", "float16"]),
       apply=st.sampled_from([apply_on_host, apply_on_device]))
def test_apply_is_exact_against_a_reference(rows, vocab, extra_words, seed, dtype, apply):
    """Both applications (the CPU's, the GPU's): every allowed logit comes back bit for bit,
    every other one is -inf, whatever the mask width against the vocabulary (a mask narrower
    than a padded model vocabulary bans the rest)."""
    rng = np.random.default_rng(seed)
    words = max(1, (vocab + 31) // 32 + extra_words)
    mask = rng.integers(-2**31, 2**31, size=(rows, words), dtype=np.int64).astype(np.int32)
    logits = mx.array(rng.normal(size=(rows, vocab)).astype(np.float32) * 30).astype(getattr(mx, dtype))
    got = np.array(apply(logits, mask).astype(mx.float32))
    bits = np.unpackbits(mask.view(np.uint8), axis=-1, bitorder="little").astype(bool)
    allowed = np.zeros((rows, vocab), dtype=bool)
    allowed[:, :min(vocab, bits.shape[1])] = bits[:, :vocab]
    want = np.where(allowed, np.array(logits.astype(mx.float32)), -np.inf)
    assert np.array_equal(got, want)
    assert apply(logits, mask).dtype == logits.dtype


@settings(max_examples=examples(30), deadline=None)
@given(vocab=st.integers(1, 300), seed=st.integers(0, 2**32 - 1),
       edits=st.lists(st.tuples(st.integers(0, 330), st.booleans()), max_size=12))
def test_set_tokens_and_allows_most_against_a_reference(vocab, seed, edits):
    rng = np.random.default_rng(seed)
    row = rng.integers(-2**31, 2**31, size=(vocab + 31) // 32, dtype=np.int64).astype(np.int32)
    bits = np.unpackbits(row.view(np.uint8), bitorder="little").astype(bool)
    for token, allowed in edits:
        set_tokens(row, [token], allowed)
        if token < bits.shape[0]:
            bits[token] = allowed
    assert np.array_equal(np.unpackbits(row.view(np.uint8), bitorder="little").astype(bool), bits)
    assert allows_most(row, vocab) == (int(bits.sum()) * 2 > vocab)
    assert np.array_equal(allowed_tokens(row), np.flatnonzero(bits))
    for token in {0, vocab - 1, vocab + 40, *(t for t, _ in edits)}:
        assert allows_token(row, token) == (token < bits.shape[0] and bool(bits[token]))


@settings(max_examples=examples(40), deadline=None)
@given(words=st.integers(1, 70), seed=st.integers(0, 2**32 - 1),
       density=st.sampled_from([0.0, 0.01, 0.2, 1.0]),
       layout=st.sampled_from(["alone", "row 0", "row 1", "strided"]))
def test_allowed_count_and_tokens_against_a_reference(words, seed, density, layout):
    """Counted and listed over uint64 pairs of words (the odd last word apart): the same as
    unpacking every bit, for rows of any width, at any offset in a bitmask (an odd row of an
    odd width is not 8-byte aligned), and strided."""
    rng = np.random.default_rng(seed)
    bits = rng.random(words * 32) < density
    packed = np.packbits(bits, bitorder="little").view(np.int32)
    if layout == "alone":
        row = packed.copy()
    elif layout == "strided":
        row = np.stack([packed, ~packed], axis=1)[:, 0]
    else:
        bitmask = np.full((3, words), 0x5A5A5A5A, dtype=np.int32)
        bitmask[int(layout[-1])] = packed
        row = bitmask[int(layout[-1])]
    tokens = allowed_tokens(row)
    assert tokens.dtype == np.int64
    assert np.array_equal(tokens, np.flatnonzero(bits))
    assert allowed_count(row) == int(bits.sum())


def test_buffer_address_is_the_arrays_data_pointer():
    from afm_struct.grammar.engines.protocol import buffer_address

    bitmask = np.zeros((3, 7), dtype=np.int32)
    frozen = bitmask[2]
    frozen.flags.writeable = False
    for array in (bitmask, bitmask[1], bitmask[1:2], bitmask[:, 3], frozen, np.zeros(0, np.int32)):
        assert buffer_address(array) == array.ctypes.data
