"""The decode step's masks, filled for the whole batch in one engine call.

Filled together (llguidance's executor, one bitmask for the batch) or one by one, every row's
mask and flags are the same; rows that cannot join the call (a thinking gate before the
answer, another engine) are filled alone in the same bitmask; and a row whose engine fails
inside the shared call ends alone: the others get exactly their own masks.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from afm_struct.decoding.grammar_budget import GrammarBudget
from afm_struct.decoding.next_mask import LIST_ALLOWED_MAX, MaskFiller
from afm_struct.decoding.reasoning_gate import ReasoningGate, ReasoningTags
from afm_struct.grammar.engines.llguidance_engine import LLGuidanceEngine
from afm_struct.grammar.engines.protocol import MatcherError

from .randomized import examples

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
     "required": ["name", "age"]},
    {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 4},
    {"type": "object", "properties": {"ok": {"type": "boolean"}, "tags": {"type": "array",
                                                                          "items": {"type": "string"}}}},
]
INSTANCES = [
    {"name": "Ada Lovelace", "age": 36},
    ["red", "blue", "green"],
    {"ok": True, "tags": ["x", "hello world"]},
]


@pytest.fixture(scope="module")
def grammars(tokenizer: Any) -> list[Any]:
    backend = LLGuidanceEngine(tokenizer)
    return [backend.compile_json_schema(s) for s in SCHEMAS]


class Alone:
    """A matcher without a batch fill (another engine, or a wrapper that does not offer one)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "batch_fill":
            raise AttributeError(name)
        return getattr(self.inner, name)


def _row(matcher: Any) -> Any:
    return SimpleNamespace(matcher=matcher, closer=None, tokens=[], max_tokens=1000, mask=None,
                           mask_all=True, mask_free=True, timings=SimpleNamespace(mask_s=0.0),
                           grammar=GrammarBudget(None), done=False,
                           request=SimpleNamespace(stops_cut_grammar=False))


def _rows(tokenizer: Any, grammars: list[Any], plan: list[tuple[int, int, str]]) -> list[Any]:
    """A fresh batch: per row (schema, tokens of its instance already consumed, wrapper)."""
    rows = []
    for which, depth, wrap in plan:
        ids = tokenizer.encode(json.dumps(INSTANCES[which]))
        matcher = grammars[which].new_matcher()
        if wrap == "gate":  # thinking closed in the prompt: the gate is answering
            matcher = ReasoningGate(matcher, tokenizer, ReasoningTags(opened_in_prompt=False))
        for t in ids if wrap == "whole" else ids[:depth % len(ids)]:
            assert matcher.advance(t)
        rows.append(_row(Alone(matcher) if wrap == "alone" else matcher))
    return rows


def _fill(filler: MaskFiller, rows: list[Any], reuse: Any = None) -> dict[int, Exception]:
    errors: dict[int, Exception] = {}
    filler.fill_rows(rows, lambda seq, exc: errors.__setitem__(rows.index(seq), exc), reuse)
    return errors


@settings(max_examples=examples(25), deadline=None)
@given(plan=st.lists(st.tuples(st.integers(0, len(SCHEMAS) - 1), st.integers(0, 40),
                               st.sampled_from(["plain", "plain", "gate", "alone"])),
                     min_size=1, max_size=9))
def test_together_equals_one_by_one(tokenizer: Any, grammars: list[Any], plan: list[Any]) -> None:
    filler = MaskFiller(tokenizer.vocab_size, tokenizer.eos_token_ids)
    together = _rows(tokenizer, grammars, plan)
    # A group's bitmask from an earlier step, garbage in it, maybe larger than the batch.
    used = np.full((len(plan) + 2, (tokenizer.vocab_size + 31) // 32), 0x5A5A5A5A, dtype=np.int32)
    assert _fill(filler, together, used) == {}
    filler.together = False
    alone = _rows(tokenizer, grammars, plan)
    assert _fill(filler, alone) == {}
    for a, b in zip(together, alone, strict=True):
        assert np.array_equal(a.mask, b.mask)
        assert (a.mask_all, a.mask_free) == (b.mask_all, b.mask_free)
        # A mask with few tokens lists them (greedy rows sample from those alone).
        allowed = np.flatnonzero(np.unpackbits(a.mask[0].view(np.uint8), bitorder="little"))
        if allowed.size <= LIST_ALLOWED_MAX:
            assert np.array_equal(a.mask_tokens, allowed) and np.array_equal(b.mask_tokens, allowed)
        else:
            assert a.mask_tokens is None and b.mask_tokens is None
    # One bitmask for the batch: every row's mask is a row of it (the reused one).
    assert all(np.shares_memory(r.mask, used) for r in together)


def test_a_padded_model_vocabulary_goes_through_a_scratch(tokenizer: Any, grammars: list[Any]) -> None:
    plan = [(0, 3, "plain"), (1, 2, "plain")]
    padded = MaskFiller(tokenizer.vocab_size + 100, tokenizer.eos_token_ids)
    rows = _rows(tokenizer, grammars, plan)
    assert _fill(padded, rows) == {}
    padded.together = False
    ref = _rows(tokenizer, grammars, plan)
    assert _fill(padded, ref) == {}
    for a, b in zip(rows, ref, strict=True):
        assert np.array_equal(a.mask, b.mask)


def test_a_row_whose_engine_fails_in_the_shared_call_ends_alone(tokenizer: Any, grammars: list[Any]) -> None:
    plan = [(0, 2, "plain"), (1, 3, "plain"), (2, 4, "plain"), (0, 5, "gate")]
    rows = _rows(tokenizer, grammars, plan)
    broken = rows[1].matcher
    ids = tokenizer.encode(json.dumps(INSTANCES[0]))
    assert not broken.advance(ids[0] if ids[0] != tokenizer.encode("[")[0] else ids[1])  # stops it
    assert broken.batch_fill() is not None  # it still joins the shared call
    errors = _fill(MaskFiller(tokenizer.vocab_size, tokenizer.eos_token_ids), rows)
    assert list(errors) == [1] and isinstance(errors[1], MatcherError)
    healthy = _rows(tokenizer, grammars, [plan[0], plan[2], plan[3]])
    filler = MaskFiller(tokenizer.vocab_size, tokenizer.eos_token_ids)
    filler.together = False
    assert _fill(filler, healthy) == {}
    for a, b in zip([rows[0], rows[2], rows[3]], healthy, strict=True):
        assert np.array_equal(a.mask, b.mask)


@settings(max_examples=examples(15), deadline=None)
@given(plan=st.lists(st.tuples(st.integers(0, len(SCHEMAS) - 1), st.integers(0, 40),
                               st.sampled_from(["plain", "gate", "alone"])), min_size=1, max_size=6),
       order=st.randoms(use_true_random=False), seed=st.integers(0, 2**16))
def test_sampling_reads_each_row_its_own_mask(tokenizer: Any, grammars: list[Any], plan: list[Any],
                                              order: Any, seed: int) -> None:
    """The group's bitmask is applied in place when the sampled rows are its rows in order,
    and each row still samples under its own mask when they are not (rows left, or joined)."""
    import mlx.core as mx

    from afm_struct.decoding.step_sampling import sample_rows

    rows = _rows(tokenizer, grammars, plan)
    used = _fill_and_keep(MaskFiller(tokenizer.vocab_size, tokenizer.eos_token_ids), rows)
    logits = mx.random.normal((len(rows), tokenizer.vocab_size), key=mx.random.key(seed))
    for r, i in zip(rows, range(len(rows)), strict=True):
        r.logits, r.processors, r.sampler = logits[i:i + 1], [], lambda x: mx.argmax(x, axis=-1)
        r.request.logprobs, r.started = None, 0.0
        r.timings.first_token_s = None
    picked = list(rows)
    order.shuffle(picked)
    for batch in (rows, picked, rows[1:]):
        if not batch:
            continue
        shaped = [SimpleNamespace(**{**vars(r), "logits": logits[rows.index(r)][None]}) for r in batch]
        tokens, _ = sample_rows(shaped, bitmask=used)
        copied, _ = sample_rows(shaped)
        assert tokens == copied
        for r, t in zip(batch, tokens, strict=True):
            assert (int(r.mask[0, t >> 5]) >> (t & 31)) & 1, "a token its own mask bans"


def _fill_and_keep(filler: MaskFiller, rows: list[Any]) -> Any:
    used = np.zeros((len(rows) + 1, (filler.vocab_size + 31) // 32), dtype=np.int32)
    assert filler.fill_rows(rows, lambda seq, exc: (_ for _ in ()).throw(exc), used) is used
    return used


@pytest.mark.parametrize("narrow", [1, 37])
def test_a_row_narrower_than_the_grammar_gets_its_prefix_and_nothing_past_it(
        tokenizer: Any, grammars: list[Any], narrow: int) -> None:
    """A model vocabulary narrower than the tokenizer's: the row holds the prefix of the
    grammar's mask, and the words after it (the next row of a batch) are not written."""
    words = (tokenizer.vocab_size + 31) // 32
    full = np.zeros((1, words), dtype=np.int32)
    grammars[2].new_matcher().fill_mask(full[0])
    buffer = np.full(words + 8, 0x5A5A5A5A, dtype=np.int32)
    grammars[2].new_matcher().fill_mask(buffer[:words - narrow])
    assert np.array_equal(buffer[:words - narrow], full[0, :words - narrow])
    assert (buffer[words - narrow:] == 0x5A5A5A5A).all()


def _same_masks(together: list[Any], alone: list[Any]) -> None:
    for a, b in zip(together, alone, strict=True):
        assert np.array_equal(a.mask, b.mask)
        assert (a.mask_all, a.mask_free) == (b.mask_all, b.mask_free)
        if b.mask_tokens is None:
            assert a.mask_tokens is None
        else:
            assert np.array_equal(a.mask_tokens, b.mask_tokens)


@settings(max_examples=examples(20), deadline=None)
@given(plan=st.lists(st.tuples(st.integers(0, len(SCHEMAS) - 1), st.integers(0, 40),
                               st.sampled_from(["plain", "plain", "plain", "whole", "gate", "alone"])),
                     min_size=2, max_size=12),
       chunks=st.integers(2, 5), extra_eos=st.lists(st.integers(0, 49151), max_size=3))
def test_chunked_fill_equals_one_by_one(tokenizer: Any, grammars: list[Any], plan: list[Any],
                                        chunks: int, extra_eos: list[int]) -> None:
    """A group filled in chunks on the helper thread (the rows' counts and token lists made
    there, their own part done meanwhile on the calling thread): every row's mask, flags and
    token list as filled one by one, with end-of-turn ids set (a whole instance: accepting)
    or cleared (ids the grammar allows) after the count."""
    eos = set(tokenizer.eos_token_ids) | set(extra_eos)
    filler = MaskFiller(tokenizer.vocab_size, eos)
    filler.chunk_rows, filler.chunks = 1, chunks
    together = _rows(tokenizer, grammars, plan)
    used = np.full((len(plan) + 1, (tokenizer.vocab_size + 31) // 32), 0x5A5A5A5A, dtype=np.int32)
    assert _fill(filler, together, used) == {}
    filler.together = False
    alone = _rows(tokenizer, grammars, plan)
    assert _fill(filler, alone) == {}
    _same_masks(together, alone)
    assert all(np.shares_memory(r.mask, used) for r in together)


def test_a_chunk_whose_call_refuses_is_filled_row_by_row(tokenizer: Any, grammars: list[Any],
                                                         monkeypatch: Any) -> None:
    """The engine call of one chunk raises: its rows are filled on their own, the other
    chunks' rows stay filled together, and no row fails."""
    from afm_struct.grammar.engines import llguidance_engine

    real = llguidance_engine.fill_masks_together
    calls: list[list[int]] = []

    def second_refuses(pairs: Any, bitmask: Any) -> None:
        calls.append([i for _, i in pairs])
        if len(calls) == 2:
            raise ValueError("refused")
        real(pairs, bitmask)

    monkeypatch.setattr(llguidance_engine, "fill_masks_together", second_refuses)
    plan = [(k % len(SCHEMAS), 3 + k, "plain") for k in range(7)]
    filler = MaskFiller(tokenizer.vocab_size, tokenizer.eos_token_ids)
    filler.chunk_rows, filler.chunks = 2, 4
    together = _rows(tokenizer, grammars, plan)
    assert _fill(filler, together) == {}
    assert calls == [[0, 1], [2, 3], [4, 5], [6]]
    filler.together = False
    alone = _rows(tokenizer, grammars, plan)
    assert _fill(filler, alone) == {}
    _same_masks(together, alone)


def test_a_failing_row_in_a_chunk_ends_alone_and_no_write_follows(tokenizer: Any, grammars: list[Any],
                                                                   monkeypatch: Any) -> None:
    """A row of the first chunk fails and ``on_error`` raises: ``fill_rows`` raises only after
    the helper thread's last call is written (the caller may reuse the bitmask at once)."""
    import time

    from afm_struct.grammar.engines import llguidance_engine

    real = llguidance_engine.fill_masks_together
    ended: list[float] = []

    def slow_after_first(pairs: Any, bitmask: Any) -> None:
        if ended:
            time.sleep(0.05)  # later chunks still running when the first row's error is raised
        real(pairs, bitmask)
        ended.append(time.perf_counter())

    monkeypatch.setattr(llguidance_engine, "fill_masks_together", slow_after_first)
    plan = [(0, 2, "plain"), (1, 3, "plain"), (2, 4, "plain"), (0, 5, "plain"), (1, 1, "plain")]
    rows = _rows(tokenizer, grammars, plan)
    ids = tokenizer.encode(json.dumps(INSTANCES[0]))
    assert not rows[0].matcher.advance(ids[0] if ids[0] != tokenizer.encode("[")[0] else ids[1])
    filler = MaskFiller(tokenizer.vocab_size, tokenizer.eos_token_ids)
    filler.chunk_rows, filler.chunks = 1, 5
    with pytest.raises(MatcherError):
        filler.fill_rows(rows, lambda seq, exc: (_ for _ in ()).throw(exc))
    raised = time.perf_counter()
    assert len(ended) == len(plan) and max(ended) <= raised
    # The same batch with an on_error that records: only the broken row fails.
    rows = _rows(tokenizer, grammars, plan)
    assert not rows[0].matcher.advance(ids[0] if ids[0] != tokenizer.encode("[")[0] else ids[1])
    errors = _fill(filler, rows)
    assert list(errors) == [0]
    alone = _rows(tokenizer, grammars, plan[1:])
    filler.together = False
    assert _fill(filler, alone) == {}
    _same_masks(rows[1:], alone)


@pytest.mark.parametrize(("cpus", "threads"), [(1, 2), (2, 4), (3, 6), (4, 8), (10, 20), (64, 32)])
def test_the_executor_has_two_threads_a_core(cpus: int, threads: int) -> None:
    """llguidance's default (80 % of the CPUs) is one thread on 2 cores, no faster than row by
    row; one a core leaves a core idle behind the batch's dearest rows (mask_threads)."""
    from afm_struct.grammar.engines.llguidance_engine import mask_threads

    assert mask_threads(cpus) == threads


class _Fixed:
    """A matcher whose mask is written already (by a batch call) and that is or is not accepting."""

    def __init__(self, accepting: bool) -> None:
        self.accepting = accepting

    def error(self) -> None:
        return None

    def is_accepting(self) -> bool:
        return self.accepting


@pytest.mark.parametrize("accepting", [True, False])
@pytest.mark.parametrize("edge", [-1, 0, 1])
def test_the_helpers_count_is_corrected_for_the_eos_bits(accepting: bool, edge: int) -> None:
    """A row counted with its chunk before the EOS rule: its count and token list,
    corrected for the end-of-turn bits set (accepting) or cleared, decide the listing bound
    exactly as a count of the final row does."""
    from afm_struct.decoding.next_mask import count_rows

    vocab, eos = 20_000, {7, 9_000, 19_999}
    words = (vocab + 31) // 32
    base = np.zeros(words, dtype=np.int32)
    # LIST_ALLOWED_MAX + edge tokens, the EOS ids among them when not accepting (they get cleared).
    plain = [t for t in range(100, vocab, 3) if t not in eos]
    allowed = plain[:LIST_ALLOWED_MAX + edge - (0 if accepting else 3)]
    allowed += [] if accepting else sorted(eos)
    for t in allowed:
        base[t >> 5] |= np.int32(np.uint32(1 << (t & 31)).view(np.int32))
    results = []
    for counted in (None, "helper"):
        bitmask = base[None].copy()
        seq = _row(_Fixed(accepting))
        seq.mask_tokens = None
        hint = count_rows(bitmask, [0], LIST_ALLOWED_MAX + len(eos))[0] if counted else None
        MaskFiller(vocab, eos)._finish_row(seq, bitmask[0], filled=True, counted=hint)
        results.append((seq.mask_free, None if seq.mask_tokens is None else seq.mask_tokens.tolist()))
    assert results[0] == results[1]
    final = len(allowed) + (3 if accepting else -3)
    assert (results[0][1] is not None) == (final <= LIST_ALLOWED_MAX)


@settings(max_examples=examples(60), deadline=None)
@given(words=st.integers(1, 70), rows=st.integers(1, 6), seed=st.integers(0, 2**16),
       density=st.sampled_from([0.0, 0.01, 0.3, 1.0]), pick=st.sampled_from(["all", "some", "reversed"]))
def test_a_chunks_count_is_each_rows_own(words: int, rows: int, seed: int, density: float, pick: str) -> None:
    """count_rows (one pass for a chunk, 64-bit words when the width is even, the bits listed
    through boolean views) gives each row what allowed_count / allowed_tokens give it alone,
    for odd and even widths, rows in any order, empty, sparse and full rows."""
    from afm_struct.decoding.masking import allowed_count, allowed_tokens
    from afm_struct.decoding.next_mask import count_rows

    rng = np.random.default_rng(seed)
    bits = rng.random((rows, words * 32)) < density
    bitmask = np.packbits(bits, axis=1, bitorder="little").view(np.int32).copy()
    index = list(range(rows))
    if pick == "some":
        index = index[::2]
    elif pick == "reversed":
        index = index[::-1]
    list_max = int(rng.integers(0, words * 32 + 1))
    for i, (count, tokens) in zip(index, count_rows(bitmask, index, list_max), strict=True):
        assert count == allowed_count(bitmask[i]) == int(bits[i].sum())
        if count <= list_max:
            assert tokens is not None and np.array_equal(tokens, allowed_tokens(bitmask[i]))
            assert np.array_equal(tokens, np.flatnonzero(bits[i]))
        else:
            assert tokens is None
