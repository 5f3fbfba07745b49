"""Constrained decoding in the loop: masks, termination, fast-forward, reasoning gate."""

from __future__ import annotations

import json

import jsonschema
import pytest

from afm_struct.decoding.generator import Finished, GenerationRequest, Generator
from afm_struct.decoding.reasoning_gate import ReasoningTags
from afm_struct.decoding.sampling import SamplingParams
from afm_struct.grammar.compiler import compile_constraint
from afm_struct.grammar.spec import JsonObjectRequest, JsonSchemaRequest
from afm_struct.testing import random_loaded_model, scripted_loaded_model

SCHEMAS = {
    "nested": {"type": "object", "properties": {
        "user": {"type": "object", "properties": {"id": {"type": "integer"}, "tags": {
            "type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 3}},
                 "required": ["id", "tags"], "additionalProperties": False}},
        "required": ["user"], "additionalProperties": False},
    "array_bounds": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 4},
    "enum": {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]},
                                              "size": {"const": "XL"}},
             "required": ["color", "size"], "additionalProperties": False},
    "any_of": {"anyOf": [{"type": "integer"}, {"type": "object", "properties": {
        "k": {"type": "boolean"}}, "required": ["k"], "additionalProperties": False}]},
    "defs_ref": {"$defs": {"pt": {"type": "object", "properties": {"x": {"type": "number"},
                                                                   "y": {"type": "number"}},
                                  "required": ["x", "y"], "additionalProperties": False}},
                 "type": "object",
                 "properties": {"a": {"$ref": "#/$defs/pt"}, "b": {"$ref": "#/$defs/pt"}},
                 "required": ["a", "b"], "additionalProperties": False},
    "recursive": {"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer"},
        "kids": {"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/node"}}},
        "required": ["v"], "additionalProperties": False}}, "$ref": "#/$defs/node"},
    "nullable": {"type": "object", "properties": {"n": {"type": ["string", "null"], "maxLength": 4}},
                 "required": ["n"], "additionalProperties": False},
    "pattern": {"type": "object",
                "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"}},
                "required": ["code"], "additionalProperties": False},
    "format": {"type": "object", "properties": {"when": {"type": "string", "format": "date"}},
               "required": ["when"], "additionalProperties": False},
}


def finish_of(events) -> Finished:
    *_, fin = events
    assert isinstance(fin, Finished)
    return fin


@pytest.fixture(scope="module")
def prompt(tokenizer):
    return tokenizer.encode_chat([{"role": "user", "content": "JSON please"}])


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_random_logits_always_give_valid_output(tokenizer, prompt, name):
    schema = SCHEMAS[name]
    constraint = compile_constraint(tokenizer, JsonSchemaRequest(schema))
    assert constraint.mode == "enforced", constraint.reason
    finished = 0
    for seed in range(8):
        gen = Generator.from_loaded(random_loaded_model(tokenizer, seed))
        params = SamplingParams(temperature=1.0, seed=seed, max_tokens=160)
        fin = finish_of(gen.generate(GenerationRequest(prompt, params, constraint=constraint)))
        assert fin.reason in ("stop", "length"), fin.error
        if fin.reason == "stop":
            finished += 1
            jsonschema.validate(json.loads(fin.text), schema)
            assert fin.grammar_complete
    assert finished >= 5, f"only {finished}/8 random runs finished for {name}"


def test_fast_forward_gives_the_same_text_in_fewer_model_calls(tokenizer, prompt):
    schema = SCHEMAS["enum"]
    script = '{"color": "green", "size": "XL"}'
    constraint = compile_constraint(tokenizer, JsonSchemaRequest(schema))
    results = {}
    for ff in (False, True):
        lm = scripted_loaded_model(tokenizer, script)
        gen = Generator.from_loaded(lm)
        params = SamplingParams(temperature=0)
        request = GenerationRequest(prompt, params, constraint=constraint, fast_forward=ff)
        fin = finish_of(gen.generate(request))
        results[ff] = (fin, lm.model.calls)
    (plain, calls_plain), (fast, calls_fast) = results[False], results[True]
    assert plain.text == fast.text == script
    assert plain.usage.completion_tokens == fast.usage.completion_tokens
    assert fast.usage.forced_tokens > 0 and plain.usage.forced_tokens == 0
    assert calls_fast <= calls_plain - fast.usage.forced_tokens + 1


def test_eos_is_banned_until_the_grammar_accepts(tokenizer, prompt):
    # The script ends (EOS) in the middle of the object; the mask must not let it.
    constraint = compile_constraint(tokenizer, JsonSchemaRequest(SCHEMAS["enum"]))
    gen = Generator.from_loaded(scripted_loaded_model(tokenizer, '{"color": "red"'))
    fin = finish_of(gen.generate(GenerationRequest(prompt, SamplingParams(temperature=0),
                                                   constraint=constraint)))
    assert fin.reason == "stop"
    assert json.loads(fin.text) == {"color": "red", "size": "XL"}


def test_grammar_complete_stops_with_stop(tokenizer, prompt):
    # The script rambles on after the object; the finished grammar ends the turn.
    constraint = compile_constraint(tokenizer, JsonObjectRequest())
    gen = Generator.from_loaded(scripted_loaded_model(tokenizer, '{"a": 1} and more words'))
    fin = finish_of(gen.generate(GenerationRequest(prompt, SamplingParams(temperature=0),
                                                   constraint=constraint)))
    assert fin.reason == "stop"
    assert json.loads(fin.text) == {"a": 1}


def test_max_tokens_cut_is_length_and_incomplete(tokenizer, prompt):
    constraint = compile_constraint(tokenizer, JsonSchemaRequest(SCHEMAS["nested"]))
    gen = Generator.from_loaded(scripted_loaded_model(tokenizer, '{"user": {"id": 7, "tags": ["a"]}}'))
    # close_on_length=False: the old cut (with it on, see test_close_on_length.py).
    fin = finish_of(gen.generate(GenerationRequest(prompt, SamplingParams(temperature=0, max_tokens=5),
                                                   constraint=constraint, close_on_length=False)))
    assert fin.reason == "length"
    assert fin.grammar_complete is False
    assert not constraint.validate(fin.text).ok


def test_reasoning_block_is_unconstrained_then_the_answer_is(tokenizer, prompt):
    script = '<think>The user wants {broken json here</think>\n{"color": "blue", "size": "XL"}'
    constraint = compile_constraint(tokenizer, JsonSchemaRequest(SCHEMAS["enum"]))
    gen = Generator.from_loaded(scripted_loaded_model(tokenizer, script))
    request = GenerationRequest(prompt, SamplingParams(temperature=0), constraint=constraint,
                                reasoning=ReasoningTags())
    fin = finish_of(gen.generate(request))
    assert fin.reason == "stop"
    assert fin.text == script
    answer = fin.text.split("</think>", 1)[1]
    assert json.loads(answer) == {"color": "blue", "size": "XL"}


def test_without_the_gate_the_mask_applies_from_the_first_token(tokenizer, prompt):
    script = '<think>plan</think>{"color": "blue", "size": "XL"}'
    constraint = compile_constraint(tokenizer, JsonSchemaRequest(SCHEMAS["enum"]))
    gen = Generator.from_loaded(scripted_loaded_model(tokenizer, script))
    fin = finish_of(gen.generate(GenerationRequest(prompt, SamplingParams(temperature=0, max_tokens=40),
                                                   constraint=constraint)))
    assert not fin.text.startswith("<think>")
    assert fin.text.startswith("{")


def test_reasoning_opened_by_the_prompt(tokenizer, prompt):
    script = 'thinking about it</think>{"color": "red", "size": "XL"}'
    constraint = compile_constraint(tokenizer, JsonSchemaRequest(SCHEMAS["enum"]))
    gen = Generator.from_loaded(scripted_loaded_model(tokenizer, script))
    tags = ReasoningTags(opened_in_prompt=True)
    fin = finish_of(gen.generate(GenerationRequest(prompt, SamplingParams(temperature=0),
                                                   constraint=constraint, reasoning=tags)))
    assert fin.text == script


class _FastBackend:
    def __init__(self, vocab: dict[str, int]) -> None:
        self.vocab = vocab

    def token_to_id(self, token: str) -> int | None:
        return self.vocab.get(token)


class _FastHF:
    """A transformers fast tokenizer: the vocabulary behind ``_tokenizer``; get_vocab is slow."""

    def __init__(self, vocab: dict[str, int]) -> None:
        self._tokenizer = _FastBackend(vocab)

    def get_vocab(self) -> dict[str, int]:
        raise AssertionError("get_vocab() builds the whole vocabulary: not per request")


class _SlowHF:
    def __init__(self, vocab: dict[str, int]) -> None:
        self.vocab = vocab

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab)


@pytest.mark.parametrize("hf_type", [_FastHF, _SlowHF])
def test_reasoning_tags_detected_from_the_vocabulary(hf_type) -> None:  # type: ignore[no-untyped-def]
    from types import SimpleNamespace

    from afm_struct.decoding.reasoning_gate import detect_reasoning_tags

    thinker = SimpleNamespace(hf=hf_type({"<think>": 5, "</think>": 6, "a": 7}))
    tags = detect_reasoning_tags(thinker, "<|user|>hi<|assistant|><think>\n")
    assert tags == ReasoningTags("<think>", "</think>", opened_in_prompt=True)
    assert not detect_reasoning_tags(thinker, "plain").opened_in_prompt  # type: ignore[union-attr]
    half = SimpleNamespace(hf=hf_type({"<think>": 5}))
    assert detect_reasoning_tags(half, "x") is None


def test_embedded_tokenizer_has_no_thinking_tags(tokenizer) -> None:  # type: ignore[no-untyped-def]
    from afm_struct.decoding.reasoning_gate import detect_reasoning_tags

    assert detect_reasoning_tags(tokenizer, "anything") is None
