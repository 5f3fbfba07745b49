"""Far from the cut the closer repairs its plan from the plan's text instead of searching.

``text_repaired_plan`` (decoding/plan_repair.py) re-tokenizes the known completion's text after
a token off it, and the closer keeps the result, an upper bound on the shortest completion,
only while the room exceeds twice the plan (issue 40, round 5).  A plan kept there is what gets
fed if the next tokens cut the output, so each one must make a valid instance, and the cut
output must validate: checked here with jsonschema against deep schemas (every level required,
so one token can make the completion much longer), a random-weight model at temperature 1
(it leaves the plan on most tokens) and budgets from tight to roomy.
"""

from __future__ import annotations

import json
import os
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from afm_struct.decoding import length_close
from afm_struct.decoding.generator import Finished, GenerationRequest, Generator
from afm_struct.decoding.length_close import check_budget
from afm_struct.decoding.plan_repair import text_repaired_plan
from afm_struct.decoding.sampling import SamplingParams
from afm_struct.errors import AfmError
from afm_struct.grammar.compiler import compile_constraint
from afm_struct.grammar.spec import JsonSchemaRequest
from afm_struct.testing import random_loaded_model, scripted_loaded_model, served_scripted_model
from afm_struct_bench.serve import PROMPTS, SCHEMAS

STR = {"type": "string", "maxLength": 12}


def _obj(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


# Deep: a key or an array item opens levels whose required keys all have to be written.
DEEP = [
    _obj(a=_obj(b={"type": "array", "items": _obj(c=STR, d={"type": "array", "items": _obj(e=STR, f={
        "type": "integer"})})}), g=STR),
    _obj(rows={"type": "array", "minItems": 1, "items": _obj(k=STR, v=_obj(x={"type": "number"}, y=_obj(
        z={"type": "boolean"}, w={"type": "array", "items": STR})))}),
    _obj(t=STR, u={"type": "array", "items": {"type": "array", "items": _obj(p={"enum": ["red", "blue"]},
                                                                                   q=STR)}}),
]
EXAMPLES = int(os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES", "0")) or 10


def _recording(patch: pytest.MonkeyPatch, kept: list[tuple[int, list[int]]]) -> None:
    """Record (room, plan) of each text repair the closer is handed."""

    def recorded(matcher: Any, token: int, plan: list[int], room: int, *args: Any) -> Any:
        found = text_repaired_plan(matcher, token, plan, room, *args)
        if found is not None:
            kept.append((room, found))
        return found

    patch.setattr(length_close, "text_repaired_plan", recorded)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
          derandomize=not os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES"))
@given(index=st.integers(0, len(DEEP) - 1), max_tokens=st.integers(8, 160), seed=st.integers(0, 10_000))
def test_a_text_repaired_plan_fed_then_validates_and_the_cut_output_too(tokenizer, index, max_tokens,
                                                                          seed) -> None:
    schema = DEEP[index]
    constraint = compile_constraint(tokenizer, JsonSchemaRequest(schema, strict=True))
    try:
        check_budget(constraint, tokenizer, max_tokens, param="max_tokens")
    except AfmError:
        return  # a budget below the shortest output: refused before generating
    kept: list[tuple[int, list[int]]] = []
    tokens_at: list[list[int]] = []
    review = length_close.BudgetCloser.review

    def observed(self: Any, matcher: Any, tokens: Any, token: int, budget: int) -> Any:
        before = len(kept)
        instead = review(self, matcher, tokens, token, budget)
        if len(kept) > before and instead is None:
            tokens_at.append([*tokens, token])
        elif len(kept) > before:
            del kept[before:]  # (not taken)
        return instead

    with pytest.MonkeyPatch.context() as patch:
        _recording(patch, kept)
        patch.setattr(length_close.BudgetCloser, "review", observed)
        gen = Generator.from_loaded(random_loaded_model(tokenizer, seed))
        prompt = tokenizer.encode_chat([{"role": "user", "content": "JSON"}])
        params = SamplingParams(temperature=1.0, seed=seed, max_tokens=max_tokens)
        fin = list(gen.generate(GenerationRequest(prompt, params, constraint=constraint)))[-1]
    where = (index, max_tokens, seed)
    assert isinstance(fin, Finished) and fin.reason in ("stop", "length"), fin
    assert fin.usage.completion_tokens <= max_tokens
    jsonschema.validate(json.loads(fin.text), schema)  # the cut output is an instance
    assert len(kept) == len(tokens_at), where
    for (room, plan), written in zip(kept, tokens_at, strict=True):
        assert len(plan) <= room and len(written) + len(plan) <= max_tokens, where
        jsonschema.validate(json.loads(tokenizer.decode([*written, *plan])), schema)  # fed right then


def test_the_served_stand_in_leaves_its_plan_without_far_searches(tokenizer) -> None:
    """The served stand-in writes `` `` then ``"`` where the plan had `` "``: a text repair now,
    where a rough search ran (~3 ms); no search after a token runs without refinements (far
    from the cut), and the output still validates."""
    schema = SCHEMAS[0]
    constraint = compile_constraint(tokenizer, JsonSchemaRequest(schema, strict=True))
    check_budget(constraint, tokenizer, 200, param="max_tokens")  # admission: the first plan
    kept: list[tuple[int, list[int]]] = []
    searches: list[int | None] = []  # refinements asked after a token off the plan
    search = length_close.shortest_completion

    def searched(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("prefix"):
            searches.append(kwargs.get("refinements"))
        return search(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        _recording(patch, kept)
        patch.setattr(length_close, "shortest_completion", searched)
        gen = Generator.from_loaded(served_scripted_model(1e9, tokenizer=tokenizer))
        prompt = tokenizer.encode_chat([{"role": "user", "content": PROMPTS[0]}])
        params = SamplingParams(temperature=0.0, max_tokens=200)
        fin = list(gen.generate(GenerationRequest(prompt, params, constraint=constraint)))[-1]
    assert isinstance(fin, Finished) and fin.reason == "length", fin
    jsonschema.validate(json.loads(fin.text), schema)
    assert kept, kept
    assert 0 not in searches, searches  # no rough search: far from the cut the repairs answered


# One token can make the shortest completion much longer: an optional key whose value has many
# required keys.  Far from the cut by the old plan (``}``: room > twice it + slack), the token
# that opens ``"big`` still needs the check: a closer that skipped it there would find the
# completion (~50 tokens) longer than the room left and cut the output invalid.
BIG = {"type": "object", "properties": {
    "x": STR, "big": _obj(**{f"k{i}": {"type": "integer"} for i in range(12)})},
    "required": ["x"], "additionalProperties": False}


@pytest.mark.parametrize("room", [20, 30, 45, 60])
def test_a_key_that_opens_many_required_keys_is_checked_far_from_the_cut(tokenizer, room) -> None:
    script = '{"x": "a", "big": {' + ", ".join(f'"k{i}": {i}' for i in range(12)) + "}}"
    constraint = compile_constraint(tokenizer, JsonSchemaRequest(BIG, strict=True))
    max_tokens = len(tokenizer.encode('{"x": "a", "big')) + room
    gen = Generator.from_loaded(scripted_loaded_model(tokenizer, script))
    prompt = tokenizer.encode_chat([{"role": "user", "content": "JSON"}])
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    request = GenerationRequest(prompt, params, constraint=constraint, loop_guard=False)
    fin = list(gen.generate(request))[-1]
    assert isinstance(fin, Finished) and fin.usage.completion_tokens <= max_tokens, fin
    jsonschema.validate(json.loads(fin.text), BIG)  # cut or not, an instance
