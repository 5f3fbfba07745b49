"""The scripted stand-in costs what it declares (issue 40): its script is encoded once per text,
a call's logits are one gather of ready rows (the same values as built one by one), and its
``forward_s`` is device time spent asynchronously, waited for where the generator reads logits."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

import afm_struct.testing as testing
from afm_struct.decoding.generator import Finished, GenerationRequest, Generator
from afm_struct.decoding.sampling import SamplingParams
from afm_struct.testing import Script, ScriptedCacheOps, ScriptedModel, scripted_loaded_model

SCRIPT = '{"name": "Ada", "age": 36}'


def _prompt(tokenizer, word="go"):
    return tokenizer.encode_chat([{"role": "user", "content": word}])


def test_the_script_is_encoded_once_for_many_sequences(tokenizer, monkeypatch):
    lm = scripted_loaded_model(tokenizer, SCRIPT)  # encoded here, off the decoding thread
    texts: list[str] = []
    real_encode = tokenizer.encode

    def spy(text, *args, **kwargs):
        texts.append(text)
        return real_encode(text, *args, **kwargs)

    monkeypatch.setattr(tokenizer, "encode", spy)
    gen = Generator.from_loaded(lm)
    outs: list[list] = [[] for _ in range(5)]
    for out in outs:
        gen.add(GenerationRequest(_prompt(tokenizer), SamplingParams(temperature=0)), out.append)
    while gen.has_work:
        gen.step()
    for out in outs:
        assert isinstance(out[-1], Finished) and out[-1].text == SCRIPT
    assert SCRIPT not in texts


def _expected(model, targets):
    """Row by row, the logits the stand-in always gave: noise, +30 at the favoured token."""
    noise = np.array(model._noise)
    out = np.repeat(noise[None, None, :], len(targets) * len(targets[0]), axis=0).reshape(
        len(targets), len(targets[0]), -1)
    for b, row in enumerate(targets):
        for k, t in enumerate(row):
            if t >= 0:
                out[b, k, t] += 30.0
    return out


@pytest.mark.parametrize("ready_rows", [128, 2])  # gathered from ready rows / built in the call
def test_a_batched_call_gives_the_rows_built_one_by_one(tokenizer, monkeypatch, ready_rows):
    monkeypatch.setattr(testing, "_READY_ROWS", ready_rows)
    model = ScriptedModel(tokenizer, Script(SCRIPT))
    ops = ScriptedCacheOps()
    prompt = _prompt(tokenizer)
    caches = [model.make_cache() for _ in range(3)]
    for i, c in enumerate(caches):  # rows at different points of the script
        mx.eval(model(mx.array([prompt]), cache=c))
        if i:
            mx.eval(model(mx.array([model.script_ids_of(SCRIPT)[:i]]), cache=c))
    batch = ops.batch_of(caches)
    ops.prepare(batch, [0, 1, 1])  # rows 1 and 2 feed one token, padded to two
    out = model(mx.array([[5, 6], [7, 0], [8, 0]]), cache=batch)
    ids = [*model.script_ids_of(SCRIPT), model._eos]
    # Row i's last position so far favoured ids[i]; a padded position sees noise.
    want = [[ids[1], ids[2]], [ids[2], -1], [ids[3], -1]]
    np.testing.assert_array_equal(np.array(out), _expected(model, want))


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def test_forward_time_is_spent_asynchronously_and_queues(tokenizer, monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(testing, "time", clock)
    model = ScriptedModel(tokenizer, Script(SCRIPT, forward_s=0.005))
    cache = model.make_cache()
    model(mx.array([_prompt(tokenizer)]), cache=cache)
    model(mx.array([[1]]), cache=cache)
    assert clock.slept == []  # launching a pass does not wait for it
    clock.now += 0.003  # CPU work overlapping the passes
    model.settle()  # two passes queued: done 10 ms after the first launch
    assert clock.slept == [pytest.approx(0.007)]
    model.settle()
    assert clock.slept == [pytest.approx(0.007)]  # nothing more in flight


def test_the_generator_waits_for_the_pass_before_it_samples(tokenizer, monkeypatch):
    lm = scripted_loaded_model(tokenizer, Script(SCRIPT, forward_s=0.002))
    settles: list[int] = []
    real = lm.model.settle
    monkeypatch.setattr(lm.model, "settle", lambda: (settles.append(1), real())[1])
    events = list(Generator.from_loaded(lm).generate(
        GenerationRequest(_prompt(tokenizer), SamplingParams(temperature=0))))
    assert events[-1].text == SCRIPT
    assert len(settles) >= len(lm.tokenizer.encode(SCRIPT))  # once per sampling step at least
