"""Continuous batching: sequences join and leave a shared batch without changing their output."""

from __future__ import annotations

import json
import threading

import jsonschema
import pytest

from afm_struct.decoding.generator import Finished, GenerationRequest, Generator, TextDelta
from afm_struct.decoding.sampling import SamplingParams
from afm_struct.grammar.compiler import compile_constraint
from afm_struct.grammar.spec import JsonSchemaRequest
from afm_struct.testing import Script, random_loaded_model, scripted_loaded_model

SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string", "maxLength": 8}},
     "required": ["a", "b"], "additionalProperties": False},
    {"type": "array", "items": {"enum": ["x", "y", "z"]}, "minItems": 1, "maxItems": 5},
    {"type": "object", "properties": {"ok": {"type": "boolean"}, "items": {
        "type": "array", "maxItems": 3, "items": {"type": "number"}}},
     "required": ["ok", "items"], "additionalProperties": False},
]


def collect(gen: Generator, requests: list[GenerationRequest], *, join_every: int = 0):
    """Run requests through one generator; admit them ``join_every`` steps apart."""
    events: dict[int, list] = {i: [] for i in range(len(requests))}
    pending = list(enumerate(requests))
    max_batch = steps = 0
    while pending or gen.has_work:
        if pending and (join_every == 0 or steps % join_every == 0):
            i, req = pending.pop(0)
            gen.add(req, events[i].append)
            if join_every == 0:
                continue
        gen.step()
        steps += 1
        max_batch = max(max_batch, gen.decoding)
    return events, max_batch


def final(events: list) -> Finished:
    assert isinstance(events[-1], Finished)
    assert sum(isinstance(e, Finished) for e in events) == 1
    return events[-1]


@pytest.mark.parametrize("join_every", [0, 3])
def test_random_model_batched_equals_alone(tokenizer, join_every):
    prompt = tokenizer.encode_chat([{"role": "user", "content": "json"}])
    constraints = [compile_constraint(tokenizer, JsonSchemaRequest(s)) for s in SCHEMAS]

    def requests():
        return [GenerationRequest(prompt, SamplingParams(temperature=1.0, seed=seed, max_tokens=60),
                                  constraint=constraints[seed % len(SCHEMAS)]) for seed in range(6)]

    # Random logits depend on row order, so this checks validity under batching; equality with
    # solo runs is checked with scripted models below.
    events, max_batch = collect(Generator.from_loaded(random_loaded_model(tokenizer, 0)), requests(),
                                join_every=join_every)
    assert max_batch >= 3
    for i, evs in events.items():
        fin = final(evs)
        assert fin.reason in ("stop", "length")
        assert "".join(e.text for e in evs if isinstance(e, TextDelta)) == fin.text
        if fin.reason == "stop":
            jsonschema.validate(json.loads(fin.text), SCHEMAS[i % len(SCHEMAS)])
    assert sum(final(e).reason == "stop" for e in events.values()) >= 4


def test_scripted_batched_outputs_equal_solo_outputs(tokenizer):
    scripts = ['{"a": 12, "b": "hello"}', '["x", "z", "y"]', '{"ok": true, "items": [1.5, 2]}',
               '{"a": -3, "b": ""}', '["y"]']

    def script(prompt_ids):
        return scripts[int(tokenizer.decode(prompt_ids).split("#")[1][0])]

    def requests(ff: bool):
        return [GenerationRequest(tokenizer.encode_chat([{"role": "user", "content": f"#{i}"}]),
                                  SamplingParams(temperature=0),
                                  constraint=compile_constraint(
                                      tokenizer, JsonSchemaRequest(SCHEMAS[[0, 1, 2, 0, 1][i]])),
                                  fast_forward=ff) for i in range(len(scripts))]

    for ff in (False, True):
        solo = [final(list(Generator.from_loaded(scripted_loaded_model(tokenizer, Script(script)))
                           .generate(r))).text for r in requests(ff)]
        assert solo == scripts
        gen = Generator.from_loaded(scripted_loaded_model(tokenizer, Script(script)))
        events, max_batch = collect(gen, requests(ff), join_every=2)
        assert max_batch >= 3
        assert [final(events[i]).text for i in range(len(scripts))] == solo


def test_cancel_inside_a_batch_leaves_the_others_alone(tokenizer):
    gen = Generator.from_loaded(scripted_loaded_model(tokenizer, "one two three four five six seven"))
    prompt = tokenizer.encode_chat([{"role": "user", "content": "count"}])
    cancels = [threading.Event() for _ in range(3)]
    events: list[list] = [[], [], []]
    for i in range(3):
        gen.add(GenerationRequest(prompt, SamplingParams(temperature=0)), events[i].append, cancels[i])
    gen.step()  # prefill all three
    gen.step()
    assert gen.decoding == 3
    cancels[1].set()
    gen.step()
    assert gen.decoding == 2
    assert final(events[1]).reason == "cancelled"
    while gen.has_work:
        gen.step()
    assert final(events[0]).text == final(events[2]).text == "one two three four five six seven"


def test_batch_is_bounded_and_long_prompts_are_prefilled_in_slices(tokenizer):
    gen = Generator.from_loaded(scripted_loaded_model(tokenizer, "ok " * 20), max_batch=2,
                                busy_prefill_budget=16)
    short = tokenizer.encode_chat([{"role": "user", "content": "hi"}])
    long = tokenizer.encode_chat([{"role": "user", "content": "word " * 200}])
    ev: list[list] = [[], [], []]
    gen.add(GenerationRequest(short, SamplingParams(temperature=0, max_tokens=40)), ev[0].append)
    gen.step()
    gen.add(GenerationRequest(long, SamplingParams(temperature=0, max_tokens=5)), ev[1].append)
    gen.add(GenerationRequest(short, SamplingParams(temperature=0, max_tokens=5)), ev[2].append)
    produced = []
    while gen.has_work:
        before = sum(isinstance(e, TextDelta) for e in ev[0])
        gen.step()
        produced.append(sum(isinstance(e, TextDelta) for e in ev[0]) - before)
        assert gen.decoding <= 2
    # The running stream kept producing while the long prompt was prefilled 16 tokens a step.
    assert len(produced) > 10 and all(p >= 1 for p in produced[: 10])
    assert final(ev[1]).reason == "length" and final(ev[2]).reason == "length"


def test_feed_length_trades_padding_against_the_fixed_cost(tokenizer):
    gen = Generator.from_loaded(scripted_loaded_model(tokenizer, "x"))
    gen.fixed_positions = 8.0
    assert gen._feed_length([12]) == 12  # alone: the whole forced run in one pass
    assert gen._feed_length([3, 3, 3]) == 3  # no padding needed
    assert gen._feed_length([1] * 7 + [12]) == 1  # one long run would pad seven rows 11x
    assert gen._feed_length([10, 12]) == 10  # 20 tokens for 28 vs 22 for 32: defer two
    gen.fixed_positions = 1000.0  # a GPU-like regime: padding is nearly free
    assert gen._feed_length([1] * 7 + [12]) == 12
    assert gen._feed_length([10, 12]) == 12


def test_deferred_forced_tokens_keep_outputs_identical(tokenizer):
    scripts = ['{"a": 12, "b": "hello"}', '["x", "z", "y"]', '{"ok": true, "items": [1.5, 2]}']

    def script(prompt_ids):
        return scripts[int(tokenizer.decode(prompt_ids).split("#")[1][0])]

    def requests():
        return [GenerationRequest(tokenizer.encode_chat([{"role": "user", "content": f"#{i}"}]),
                                  SamplingParams(temperature=0),
                                  constraint=compile_constraint(tokenizer, JsonSchemaRequest(SCHEMAS[i])))
                for i in range(3)]

    lm = scripted_loaded_model(tokenizer, Script(script))
    lm.model.fixed_cost_positions = 0.1  # compute-bound: forced runs are fed a little at a time
    gen = Generator.from_loaded(lm)
    events, max_batch = collect(gen, requests())
    assert max_batch == 3
    assert [final(events[i]).text for i in range(3)] == scripts
    assert sum(final(events[i]).usage.forced_tokens for i in range(3)) > 0


def test_real_model_packed_batch_equals_each_request_alone(embedded, monkeypatch):
    """The embedded model (llama attention: ragged steps run packed) batching constrained
    requests whose fast-forward runs differ: each output equals the request run alone.

    Greedy outputs can differ in principle where two logits tie to the last bits (batch shapes
    change BLAS rounding); these prompts have no such tie on the reference machine."""
    tok = embedded.tokenizer
    prompts = ["Give a number and a word.", "Pick some letters.", "Report status and values.",
               "Another number and a word, please."]
    constraints = [compile_constraint(tok, JsonSchemaRequest(s)) for s in SCHEMAS]

    def requests():
        return [GenerationRequest(tok.encode_chat([{"role": "user", "content": p}]),
                                  SamplingParams(temperature=0, max_tokens=40),
                                  constraint=constraints[i % len(SCHEMAS)])
                for i, p in enumerate(prompts)]

    solo = [final(list(Generator.from_loaded(embedded, join_tail=0).generate(r))).text
            for r in requests()]
    from afm_struct.decoding import ragged_pass as ragged_pass_module

    packed_steps = []
    real_packed_logits = ragged_pass_module.packed_logits

    def counting(*args, **kwargs):
        packed_steps.append(args[4].rows)
        return real_packed_logits(*args, **kwargs)

    monkeypatch.setattr(ragged_pass_module, "packed_logits", counting)
    gen = Generator.from_loaded(embedded)
    assert gen.ragged.packed
    events, max_batch = collect(gen, requests(), join_every=2)
    assert max_batch >= 3
    assert any(rows >= 2 for rows in packed_steps)  # ragged steps did run packed
    assert [final(events[i]).text for i in range(len(prompts))] == solo
    for i, text in enumerate(solo):
        if final(events[i]).reason == "stop":
            jsonschema.validate(json.loads(text), SCHEMAS[i % len(SCHEMAS)])
