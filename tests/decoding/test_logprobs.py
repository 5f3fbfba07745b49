"""Token logprobs in the engine: the math on known logits, the generator's entries and spans."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace
from typing import Any

import mlx.core as mx
import numpy as np
import pytest

from afm_struct.decoding.generator import Finished, GenerationRequest, Generator, TextDelta
from afm_struct.decoding.logprobs import FLOOR, TokenLogprob, TokenTrack, token_table
from afm_struct.decoding.sampling import SamplingParams, make_sampler
from afm_struct.decoding.step_sampling import sample_rows
from afm_struct.grammar.compiler import compile_constraint
from afm_struct.grammar.spec import JsonSchemaRequest
from afm_struct.testing import random_loaded_model, scripted_loaded_model

V = 8
LOGITS = np.array([2.0, 1.0, 0.5, -1.0, 3.0, 0.0, 1.5, -2.0], dtype=np.float32)


def row(params: SamplingParams, *, logprobs: int | None, allowed: list[int] | None = None,
        tokens: list[int] | None = None, processors: list[Any] | None = None) -> SimpleNamespace:
    """A stand-in for a SequenceState: what sample_rows reads of one row."""
    mask = None
    if allowed is not None:
        bits = 0
        for t in allowed:
            bits |= 1 << t
        mask = np.array([[bits]], dtype=np.uint32).view(np.int32)
    return SimpleNamespace(
        logits=mx.array(LOGITS[None, :]), matcher=object() if allowed is not None else None,
        mask_all=allowed is None, mask=mask, processors=processors or [], tokens=tokens or [],
        request=SimpleNamespace(logprobs=logprobs), sampler=make_sampler(params),
        timings=SimpleNamespace(first_token_s=None), started=0.0)


def log_softmax(x: np.ndarray) -> np.ndarray:
    finite = x[np.isfinite(x)]
    m = finite.max()
    return x - (m + np.log(np.exp(finite - m).sum()))


def expected(params: SamplingParams, allowed: list[int] | None) -> np.ndarray:
    """The distribution the sampler draws from, by hand: mask, temperature, top-k."""
    x = LOGITS.astype(np.float64).copy()
    if allowed is not None:
        x[[i for i in range(V) if i not in allowed]] = -np.inf
    if params.temperature > 0:
        x = x / params.temperature
        if params.top_k:
            kth = np.sort(x)[-params.top_k]
            x[x < kth] = -np.inf
    return log_softmax(x)


@pytest.mark.parametrize("params", [
    SamplingParams(temperature=0.7, top_k=3, seed=5),
    SamplingParams(temperature=1.3, seed=9),
    SamplingParams(temperature=0),
])
def test_sampled_entry_is_log_softmax_of_the_processed_logits(params: SamplingParams):
    allowed = [0, 1, 2, 5, 6]  # the top logit (token 4) is masked
    tokens, stats = sample_rows([row(params, logprobs=5, allowed=allowed)])
    want = expected(params, allowed)
    st = stats[0]
    assert st is not None
    assert st.logprob == pytest.approx(want[tokens[0]], abs=1e-5)
    finite = [i for i in range(V) if np.isfinite(want[i])]
    order = sorted(finite, key=lambda i: -want[i])[:5]
    assert [t for t, _ in st.top] == order  # masked and filtered tokens never listed
    for t, lp in st.top:
        assert t in allowed and lp <= 0 and lp == pytest.approx(want[t], abs=1e-5)
    assert sum(math.exp(lp) for _, lp in st.top) <= 1 + 1e-6
    if params.temperature == 0:
        assert tokens[0] == 0  # the argmax of the allowed tokens


def test_temperature_changes_the_logprobs():
    cold = sample_rows([row(SamplingParams(temperature=0.5, seed=1), logprobs=3)])[1][0]
    hot = sample_rows([row(SamplingParams(temperature=2.0, seed=1), logprobs=3)])[1][0]
    greedy = sample_rows([row(SamplingParams(temperature=0), logprobs=3)])[1][0]
    assert cold is not None and hot is not None and greedy is not None
    assert cold.top[0][0] == hot.top[0][0] == greedy.top[0][0] == 4
    # sharper when colder; greedy reports temperature 1
    assert cold.top[0][1] > greedy.top[0][1] > hot.top[0][1]
    assert greedy.top[0][1] == pytest.approx(expected(SamplingParams(temperature=1.0), None)[4], abs=1e-5)


def test_processors_are_part_of_the_distribution():
    def penalize_top(tokens: Any, logits: mx.array) -> mx.array:
        logits[..., 4] = logits[..., 4] - 10.0
        return logits

    st = sample_rows([row(SamplingParams(temperature=0), logprobs=2, processors=[penalize_top])])[1][0]
    assert st is not None and st.top[0][0] == 0  # token 4 fell behind token 0


def test_rows_that_did_not_ask_get_nothing_and_the_same_tokens():
    params = SamplingParams(temperature=1.0, seed=11)
    a = [row(params, logprobs=None), row(params, logprobs=4, allowed=[1, 2, 3])]
    b = [row(params, logprobs=None), row(params, logprobs=None, allowed=[1, 2, 3])]
    seq_a, seq_b = [], []
    for _ in range(20):  # same seeds: asking for logprobs never changes the draws
        ta, sa = sample_rows(a)
        tb, sb = sample_rows(b)
        seq_a.append(ta)
        seq_b.append(tb)
        assert sa[0] is None and sa[1] is not None and sb == [None, None]
    assert seq_a == seq_b


def test_top_zero_reports_only_the_sampled_token():
    st = sample_rows([row(SamplingParams(temperature=0), logprobs=0)])[1][0]
    assert st is not None and st.top == [] and st.logprob < 0


# -- alignment ------------------------------------------------------------------------------


def test_track_pairs_tokens_with_the_text_that_shows_them(tokenizer):
    track = TokenTrack(1, token_table(tokenizer))
    ids = tokenizer.encode("a☕b")  # the cup is split over several byte tokens
    track.decided(ids, ids[0], None)
    pieces = ["a", *[""] * (len(ids) - 3), "☕", "b"]
    for p in pieces:
        track.text(p)
    first = track.emitted(1, final=False)
    assert [e.offset for e in first] == [0]
    cup = track.emitted(1, final=False)
    assert len(cup) == len(ids) - 2 and {(e.offset, e.end) for e in cup} == {(1, 2)}
    assert b"".join(bytes(e.bytes) for e in cup) == "☕".encode()
    assert track.emitted(0, final=True) == []  # "b" was never shown: a stop string ate it


# -- through the generator -----------------------------------------------------------------

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


def run(loaded: Any, request: GenerationRequest) -> tuple[list[TextDelta], Finished]:
    events = list(Generator.from_loaded(loaded).generate(request))
    fin = events[-1]
    assert isinstance(fin, Finished)
    return [e for e in events if isinstance(e, TextDelta)], fin


def prompt(tokenizer: Any) -> list[int]:
    return tokenizer.encode_chat([{"role": "user", "content": "hi"}])


def test_entries_cover_the_text_exactly(tokenizer):
    loaded = scripted_loaded_model(tokenizer, "Hello café ☕, world!")
    deltas, fin = run(loaded, GenerationRequest(prompt(tokenizer), SamplingParams(temperature=0), logprobs=2))
    entries = [e for d in deltas for e in d.logprobs or ()]
    assert b"".join(bytes(e.bytes) for e in entries) == fin.text.encode()
    spans = sorted({(e.offset, e.end) for e in entries})
    assert spans[0][0] == 0 and spans[-1][1] == len(fin.text)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    for d in deltas:  # each delta carries the tokens whose text ends in it
        shown = sorted({(e.offset, e.end) for e in d.logprobs or ()})
        assert "".join(fin.text[s:t] for s, t in shown) == d.text
    assert all(len(e.top) == 2 and e.logprob <= 0 for e in entries)


def test_off_means_none_and_identical_output(tokenizer):
    loaded = scripted_loaded_model(tokenizer, "Hello there, world!")
    params = SamplingParams(temperature=0.9, seed=4)
    off, fin_off = run(loaded, GenerationRequest(prompt(tokenizer), params))
    on, fin_on = run(loaded, GenerationRequest(prompt(tokenizer), params, logprobs=0))
    assert all(d.logprobs is None for d in off)
    assert fin_off.text == fin_on.text and [d.text for d in off] == [d.text for d in on]


def test_a_stop_string_drops_its_tokens(tokenizer):
    loaded = scripted_loaded_model(tokenizer, "Hello there, world! Bye")
    params = SamplingParams(temperature=0, stop=(", world",))
    deltas, fin = run(loaded, GenerationRequest(prompt(tokenizer), params, logprobs=1))
    assert fin.text == "Hello there"
    entries = [e for d in deltas for e in d.logprobs or ()]
    assert "".join(e.token for e in entries) == "Hello there"  # "," and " world" not shown
    # a token the stop string cuts in the middle is shown in part: it is reported
    deltas, fin = run(loaded, GenerationRequest(prompt(tokenizer), SamplingParams(
        temperature=0, stop=("orld",)), logprobs=1))
    assert fin.text == "Hello there, w"
    assert [e.token for d in deltas for e in d.logprobs or ()][-1] == " world"


def test_forced_tokens_have_logprob_zero_and_only_themselves(tokenizer):
    loaded = scripted_loaded_model(tokenizer, '{"name": "Ada", "age": 36}')
    constraint = compile_constraint(tokenizer, JsonSchemaRequest(SCHEMA))
    deltas, fin = run(loaded, GenerationRequest(prompt(tokenizer), SamplingParams(temperature=0),
                                                constraint=constraint, logprobs=3))
    entries = [e for d in deltas for e in d.logprobs or ()]
    forced = [e for e in entries if not e.sampled]
    assert forced and "".join(e.token for e in forced).count("age") == 1
    for e in forced:
        assert e.logprob == 0.0 and [(t.id, t.logprob) for t in e.top] == [(e.id, 0.0)]
    assert b"".join(bytes(e.bytes) for e in entries) == fin.text.encode()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_masked_tokens_never_appear_among_alternatives(tokenizer, seed):
    """Replay the grammar: every listed alternative was allowed at its position."""
    loaded = random_loaded_model(tokenizer, seed)
    constraint = compile_constraint(tokenizer, JsonSchemaRequest(SCHEMA))
    deltas, _ = run(loaded, GenerationRequest(prompt(tokenizer),
                                              SamplingParams(temperature=1.0, seed=seed, max_tokens=60),
                                              constraint=constraint, logprobs=20))
    entries: list[TokenLogprob] = [e for d in deltas for e in d.logprobs or ()]
    matcher = constraint.new_matcher()
    from afm_struct.grammar.engines.protocol import allocate_bitmask

    vocab = loaded.model.vocab_size
    mask = allocate_bitmask(1, vocab)
    for e in entries:
        mask[0][:] = 0
        matcher.fill_mask(mask[0])
        bits = np.unpackbits(mask[0].view(np.uint8), bitorder="little")
        eos_ok = matcher.is_accepting()  # the generator's EOS policy
        for alt in e.top:
            allowed = eos_ok if alt.id in tokenizer.eos_token_ids else bits[alt.id]
            assert allowed, f"masked token {alt.token!r} listed"
        assert sum(math.exp(a.logprob) for a in e.top) <= 1 + 1e-5
        assert e.logprob <= 0 and e.logprob > FLOOR
        assert matcher.advance(e.id)
    assert any(e.sampled and len(e.top) > 1 for e in entries)


def test_fast_log_sum_exp_matches_mlx():
    from afm_struct.decoding.logprobs import row_logsumexp as _logsumexp

    x = np.random.default_rng(0).standard_normal((3, 49152)).astype(np.float32) * 4
    x[1, 100:] = -np.inf  # a masked row
    x[2, 1:] = -np.inf  # one token allowed: its logprob is exactly 0
    got = np.array(_logsumexp(mx.array(x)))[:, 0]
    want = np.array(mx.logsumexp(mx.array(x), axis=-1))
    assert np.allclose(got, want, rtol=1e-6, atol=1e-5)
    assert got[2] == pytest.approx(x[2, 0], abs=1e-6)
