"""Greedy rows sample from their allowed logits without the (rows, vocabulary) masking op.

The token must be exactly what the masking op and the row's own sampler give (the step before
this shortcut): the argmax of the masked logits, ties included (the first maximum), for masks
that list their tokens, masks that do not (whose plain argmax is checked and redone when
banned), masks narrower than the logits (a padded model vocabulary), and beside rows that
still take the op (seeded sampling, logprobs, a processor that changes the logits).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import mlx.core as mx
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from afm_struct.decoding import step_sampling
from afm_struct.decoding.host_argmax import take_row
from afm_struct.decoding.logprobs import logprob_arrays, read_stats
from afm_struct.decoding.masking import allowed_count, allowed_tokens, apply_bitmask
from afm_struct.decoding.next_mask import LIST_ALLOWED_MAX
from afm_struct.decoding.sampling import (
    SamplingParams,
    make_loop_breaker,
    make_repetition_penalty,
    make_sampler,
)
from afm_struct.decoding.step_sampling import sample_rows

from .randomized import examples

LOOPING = [0] * 12  # the loop breaker acts after these tokens (on token 0, in every vocabulary)
CALM = [1, 2, 3]  # and not after these

ROW = st.fixed_dictionaries({
    "mask": st.sampled_from(["few", "most", "one", "none_in_vocab", "all", "free"]),
    "listed": st.booleans(),  # the filler listed the allowed tokens (a mask with few of them)
    "sampler": st.sampled_from(["greedy", "greedy", "greedy", "seeded"]),
    "processor": st.sampled_from([None, None, "loop_idle", "loop_active", "penalty"]),
    "logprobs": st.sampled_from([None, None, None, 2]),
})


def _mask_row(kind: str, words: int, vocab: int, rng: np.random.Generator) -> np.ndarray:
    row = np.zeros(words, dtype=np.int32)
    if kind == "few":
        for t in rng.integers(0, words * 32, size=int(rng.integers(1, 6))):
            row[t >> 5] |= np.int32(np.uint32(1 << int(t & 31)).view(np.int32))
    elif kind == "most":
        row[:] = -1
        for t in rng.integers(0, words * 32, size=int(rng.integers(1, 6))):
            row[t >> 5] &= ~np.int32(np.uint32(1 << int(t & 31)).view(np.int32))
    elif kind == "one":
        t = int(rng.integers(0, min(vocab, words * 32)))
        row[t >> 5] = np.uint32(1 << (t & 31)).view(np.int32)
    elif kind == "none_in_vocab":  # only tokens past the logits (never sampled by the op either)
        row[-1] = -1 if words * 32 > vocab else 0
    else:
        row[:] = -1
    return row


def _rows(plan: list[dict[str, Any]], vocab: int, extra_words: int,
          seed: int, held: list[str] | None = None) -> tuple[list[Any], np.ndarray]:
    """Rows as the generator holds them after a fill into one group bitmask.  ``held[i]``:
    row i's logits are its own array ("own"), row i of the pass's batch array ("batch", as
    the generator gives them: read on the host together), or were the batch's row and then
    replaced by other values ("stale": the batch array must not be read for it)."""
    rng = np.random.default_rng(seed)
    words = max(1, (vocab + 31) // 32 + extra_words)
    # Few distinct values: ties between allowed and banned tokens are common.
    logits = mx.array(rng.integers(-3, 4, size=(len(plan), vocab)).astype(np.float32))
    bitmask = np.zeros((len(plan) + 1, words), dtype=np.int32)
    rows = []
    for i, p in enumerate(plan):
        bitmask[i] = _mask_row(p["mask"], words, vocab, rng)
        row = bitmask[i]
        count = allowed_count(row)
        processors = {None: [], "loop_idle": [make_loop_breaker()], "loop_active": [make_loop_breaker()],
                      "penalty": [make_repetition_penalty(1.3)]}[p["processor"]]
        rows.append(SimpleNamespace(
            matcher=None if p["mask"] == "free" else object(), mask=bitmask[i:i + 1],
            mask_all=p["mask"] == "all" and words * 32 >= vocab,
            mask_tokens=allowed_tokens(row) if p["listed"] and count <= LIST_ALLOWED_MAX else None,
            logits=logits[i:i + 1], processors=processors,
            tokens=LOOPING if p["processor"] == "loop_active" else CALM,
            sampler=make_sampler(SamplingParams(temperature=0.0 if p["sampler"] == "greedy" else 0.9,
                                                seed=i)),
            request=SimpleNamespace(logprobs=p["logprobs"]), started=0.0,
            timings=SimpleNamespace(first_token_s=None)))
    for i, (r, how) in enumerate(zip(rows, held or [], strict=False)):
        if how != "own":
            take_row(r, logits, i)
        if how == "stale":
            r.logits = mx.array(rng.integers(-3, 4, size=(1, vocab)).astype(np.float32))
    return rows, bitmask


def _reference(rows: list[Any], vocab: int) -> tuple[list[int], list[Any]]:
    """The step before the shortcut: every masked row through the masking op, then its
    processors and its own sampler (a fresh one with the same seed)."""
    tokens, stats = [], []
    for r in rows:
        logits = r.logits
        if r.matcher is not None and not r.mask_all:
            logits = apply_bitmask(logits, r.mask)
        for proc in r.processors:
            logits = proc(r.tokens, logits[0:1])
        sampler = make_sampler(r.sampler.params)
        if r.request.logprobs is None:
            tokens.append(int(sampler(logits).item()))
            stats.append(None)
            continue
        dist = sampler.distribution(logits)
        token = sampler.draw(dist)
        tokens.append(int(token.item()))
        stats.append(read_stats(logprob_arrays([dist], token, r.request.logprobs), [r.request.logprobs])[0])
    return tokens, stats


@settings(max_examples=examples(40), deadline=None)
@given(plan=st.lists(ROW, min_size=1, max_size=7), vocab=st.integers(1, 200), extra_words=st.integers(-1, 1),
       seed=st.integers(0, 2**32 - 1), group=st.booleans(),
       held=st.lists(st.sampled_from(["own", "batch", "batch", "stale"]), min_size=7, max_size=7))
def test_tokens_are_exactly_the_masked_samplers(plan: list[dict[str, Any]], vocab: int, extra_words: int,
                                                seed: int, group: bool, held: list[str]) -> None:
    rows, bitmask = _rows(plan, vocab, extra_words, seed, held)
    want, want_stats = _reference(rows, vocab)
    got, stats = sample_rows(rows, bitmask=bitmask if group else None)
    assert got == want
    assert repr(stats) == repr(want_stats)  # (a row whose mask bans all its logits: NaN, as before)


def test_greedy_rows_that_list_their_tokens_skip_the_masking_op(monkeypatch: Any) -> None:
    """A batch of greedy rows at structural positions builds no (rows, vocabulary) array:
    with the op counted, none runs, and each row still gets its allowed token."""
    vocab = 4000
    plan = [{"mask": "few", "listed": True, "sampler": "greedy", "processor": "loop_idle",
             "logprobs": None}] * 6
    rows, bitmask = _rows(plan, vocab, 0, seed=3)
    want, _ = _reference(rows, vocab)
    calls = []
    real = step_sampling.apply_bitmask
    monkeypatch.setattr(step_sampling, "apply_bitmask", lambda *a: calls.append(a) or real(*a))
    got, _ = sample_rows(rows, bitmask=bitmask)
    assert got == want
    assert calls == []
    for r, t in zip(rows, got, strict=True):
        assert t in set(r.mask_tokens.tolist())


def test_a_banned_argmax_is_redone_under_the_mask() -> None:
    """A mask that does not list its tokens: the plain argmax is banned here, so the row
    samples again under its mask."""
    vocab = 96
    logits = np.zeros((1, vocab), dtype=np.float32)
    logits[0, 40] = 5.0  # the best token, banned
    logits[0, 70] = 4.0  # the best allowed one
    bitmask = np.full((1, 3), -1, dtype=np.int32)
    bitmask[0, 1] = ~np.int32(1 << 8)  # token 40 = word 1, bit 8
    row = SimpleNamespace(matcher=object(), mask=bitmask[0:1], mask_all=False, mask_tokens=None,
                          logits=mx.array(logits), processors=[make_loop_breaker()], tokens=CALM,
                          sampler=make_sampler(SamplingParams(temperature=0.0)),
                          request=SimpleNamespace(logprobs=None), started=0.0,
                          timings=SimpleNamespace(first_token_s=None))
    assert sample_rows([row], bitmask=bitmask)[0] == [70]


def test_whole_row_argmaxes_are_taken_on_the_host() -> None:
    """On the CPU, free greedy rows and masked ones that do not list their tokens take the
    argmax of their logits with numpy (read in place), not with their sampler's MLX op (~15x
    slower on a wide row): same tokens, no sampler call (issue 40)."""
    vocab = 4000
    plan = [{"mask": mask, "listed": False, "sampler": "greedy", "processor": proc, "logprobs": None}
            for mask in ("free", "most", "all") for proc in (None, "loop_idle")]
    rows, bitmask = _rows(plan, vocab, 0, seed=5)
    want, _ = _reference(rows, vocab)
    calls: list[int] = []

    class Spy:
        def __init__(self, inner: Any) -> None:
            self.inner, self.greedy, self.params = inner, inner.greedy, inner.params

        def __call__(self, logits: mx.array) -> mx.array:
            calls.append(1)
            return self.inner(logits)

    for r in rows:
        r.sampler = Spy(r.sampler)
    got, _ = sample_rows(rows, bitmask=bitmask)
    assert got == want
    assert calls == [] or mx.default_device() != mx.cpu
