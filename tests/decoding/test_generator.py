"""The generation loop over the scripted model: determinism, stops, budgets, errors, cancel."""

from __future__ import annotations

import threading

import pytest

from afm_struct.decoding.generator import Finished, GenerationRequest, Generator, TextDelta
from afm_struct.decoding.sampling import SamplingParams
from afm_struct.errors import ContextOverflowError
from afm_struct.testing import Script, scripted_loaded_model

SCRIPT = 'Résumé: {"id": 12, "ok": true} 😀 done.'


def run(gen: Generator, request: GenerationRequest, cancel: threading.Event | None = None):
    events = list(gen.generate(request, cancel))
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    (finish,) = [e for e in events if isinstance(e, Finished)]
    assert events[-1] is finish
    return deltas, finish


@pytest.fixture
def gen(tokenizer):
    return Generator.from_loaded(scripted_loaded_model(tokenizer, SCRIPT))


@pytest.fixture
def prompt(tokenizer):
    return tokenizer.encode_chat([{"role": "user", "content": "go"}])


def test_greedy_follows_the_script_and_counts_tokens(gen, prompt, tokenizer):
    deltas, fin = run(gen, GenerationRequest(prompt, SamplingParams(temperature=0)))
    assert "".join(deltas) == SCRIPT == fin.text
    assert fin.reason == "stop"
    assert fin.usage.prompt_tokens == len(prompt)
    assert fin.usage.completion_tokens == len(tokenizer.encode(SCRIPT))
    assert fin.timings.prefill_s > 0 and fin.timings.decode_s > 0


def test_same_seed_same_output_different_seed_differs(tokenizer, prompt):
    # A flat script (no preferred token) makes the noise logits decide: pure sampling.
    lm = scripted_loaded_model(tokenizer, Script(""))
    lm.model._eos = 10**9  # never favour EOS: sample the noise distribution
    gen = Generator.from_loaded(lm)

    def sample(seed):
        params = SamplingParams(temperature=1.0, seed=seed, max_tokens=12)
        return run(gen, GenerationRequest(prompt, params))[1].text

    assert sample(3) == sample(3)
    assert sample(3) != sample(4)


def test_stop_sequence_across_token_boundary(gen, prompt, tokenizer):
    stop = '2, "o'  # spans the tokens '2', ',', ' "', 'ok'
    deltas, fin = run(gen, GenerationRequest(prompt, SamplingParams(temperature=0, stop=(stop,))))
    assert fin.reason == "stop"
    assert "".join(deltas) == 'Résumé: {"id": 1'
    assert stop not in fin.text


def test_max_tokens_gives_length(gen, prompt):
    deltas, fin = run(gen, GenerationRequest(prompt, SamplingParams(temperature=0, max_tokens=4)))
    assert fin.reason == "length"
    assert fin.usage.completion_tokens == 4
    assert SCRIPT.startswith("".join(deltas))


def test_utf8_never_split_in_deltas(gen, prompt):
    deltas, _ = run(gen, GenerationRequest(prompt, SamplingParams(temperature=0)))
    assert all("\ufffd" not in d for d in deltas)
    assert "😀" in "".join(deltas)


def test_prompt_longer_than_context(tokenizer):
    gen = Generator.from_loaded(scripted_loaded_model(tokenizer, SCRIPT, context_length=16))
    long_prompt = tokenizer.encode("word " * 40)
    with pytest.raises(ContextOverflowError, match="maximum context length is 16 tokens"):
        list(gen.generate(GenerationRequest(long_prompt)))


def test_max_tokens_clipped_to_context(tokenizer):
    gen = Generator.from_loaded(scripted_loaded_model(tokenizer, SCRIPT, context_length=40))
    p = tokenizer.encode("word " * 35)
    _, fin = run(gen, GenerationRequest(p, SamplingParams(temperature=0, max_tokens=500)))
    assert fin.reason == "length"
    assert fin.usage.total_tokens == 40


def test_an_asked_for_budget_the_context_cannot_hold_is_refused(tokenizer):
    gen = Generator.from_loaded(scripted_loaded_model(tokenizer, SCRIPT, context_length=40))
    p = tokenizer.encode("word " * 35)
    asked = GenerationRequest(p, SamplingParams(temperature=0, max_tokens=6), fit_to_context=False)
    with pytest.raises(ContextOverflowError, match=(
            rf"However, you requested {len(p) + 6} tokens \({len(p)} in the messages, 6 in the "
            r"completion\)")) as err:
        gen.max_tokens_for(asked)
    assert err.value.param == "messages" and err.value.code == "context_length_exceeded"
    fits = GenerationRequest(p, SamplingParams(temperature=0, max_tokens=40 - len(p)), fit_to_context=False)
    assert gen.max_tokens_for(fits) == 40 - len(p)


def test_model_failure_mid_stream_is_an_error_event(tokenizer, prompt):
    gen = Generator.from_loaded(scripted_loaded_model(tokenizer, Script(SCRIPT, fail_at=3)))
    deltas, fin = run(gen, GenerationRequest(prompt, SamplingParams(temperature=0)))
    assert fin.reason == "error"
    assert "generation failed" in fin.error.message and "scripted failure" not in fin.error.message
    assert fin.error.status == 500
    assert len(deltas) <= 3


def test_cancel_stops_at_the_next_step(gen, prompt):
    cancel = threading.Event()
    seen = []
    gen.add(GenerationRequest(prompt, SamplingParams(temperature=0)), seen.append, cancel)
    gen.step()  # prefill
    gen.step()  # first token
    cancel.set()
    gen.step()
    assert not gen.has_work
    assert isinstance(seen[-1], Finished) and seen[-1].reason == "cancelled"
    assert seen[-1].usage.completion_tokens == 1


def test_interleaved_sequences_do_not_mix(tokenizer):
    lm = scripted_loaded_model(
        tokenizer, Script(lambda p: "first" if "alpha" in tokenizer.decode(p) else "second one"))
    gen = Generator.from_loaded(lm)
    outs: dict[int, list] = {0: [], 1: []}
    for i, word in enumerate(("alpha", "beta")):
        ids = tokenizer.encode_chat([{"role": "user", "content": word}])
        gen.add(GenerationRequest(ids, SamplingParams(temperature=0)), outs[i].append)
    steps = 0
    while gen.has_work:
        gen.step()
        steps += 1
        assert gen.decoding <= 2
    assert [e.text for e in outs[0] if isinstance(e, TextDelta)] == ["first"]
    assert "".join(e.text for e in outs[1] if isinstance(e, TextDelta)) == "second one"
    assert outs[0][-1].reason == outs[1][-1].reason == "stop"
    assert steps <= 6  # the two decoded side by side, not one after the other


def test_a_model_failure_ends_only_its_own_group(tokenizer):
    """Sequences whose caches do not batch decode as groups of their own: a forward pass that
    fails ends that group's request only; the other runs on as it does alone."""
    from afm_struct.testing import ScriptedCacheOps, ScriptedModel

    class Unbatchable(ScriptedCacheOps):
        def batchable(self, seq_cache):
            return False

    class FailsOnBoom(ScriptedModel):
        def _row_logits(self, c, tokens):
            rows = super()._row_logits(c, tokens)
            if c.prompt_len is not None and c.offset - c.prompt_len >= 3 and \
                    "boom" in self.tokenizer.decode(c.fed[:c.prompt_len]):
                raise RuntimeError("scripted failure")
            return rows

    def loaded():
        lm = scripted_loaded_model(tokenizer, "one two three four five six")
        lm.model = FailsOnBoom(tokenizer, Script("one two three four five six"))
        lm.model.cache_ops = Unbatchable()
        return lm

    def request(word):
        return GenerationRequest(tokenizer.encode_chat([{"role": "user", "content": word}]),
                                 SamplingParams(temperature=0))

    gen = Generator.from_loaded(loaded())
    outs: dict[str, list] = {"boom": [], "fine": []}
    for word, sink in outs.items():
        gen.add(request(word), sink.append)
    groups = 0
    while gen.has_work:
        gen.step()
        groups = max(groups, len(gen.batch.groups))
        assert not any(g.shared for g in gen.batch.groups)
    assert groups == 2
    assert outs["boom"][-1].reason == "error" and "generation failed" in outs["boom"][-1].error.message
    alone = list(Generator.from_loaded(loaded()).generate(request("fine")))
    assert outs["fine"][-1].reason == alone[-1].reason == "stop"
    assert outs["fine"][-1].text == alone[-1].text == "one two three four five six"
