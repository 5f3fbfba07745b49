"""The budget check covers every keyword that forces length (issue 46, finding 8).

``max_tokens: 20`` with ``minItems: 100000`` ran, stopped at ``length`` and served text that
does not parse, ``exact``: the closing search gives up on such outputs and the proven floor sees
only their first tokens.  Now the schema's own length floor (``grammar/schema/min_length.py``) refuses
them with ``max_tokens_too_small`` (400) naming the budget's field, on every door; budgets that
do fit are untouched.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from afm_struct.grammar.schema.min_length import min_json_bytes, min_pattern_chars

USER = [{"role": "user", "content": "hi"}]

LONG = [
    {"type": "array", "minItems": 100000},
    {"type": "string", "minLength": 100000},
    {"type": "object", "minProperties": 1000},
    {"type": "object", "required": [f"k{i}" for i in range(300)]},
    {"type": "object", "properties": {"a": {"type": "array", "minItems": 500, "items": {"type": "string",
                                                                                       "minLength": 3}}},
     "required": ["a"]},
    {"type": "array", "contains": {"type": "integer"}, "minContains": 5000},
    {"type": "array", "prefixItems": [{"const": "x" * 4000}]  , "minItems": 1},
    {"type": "string", "pattern": "^[a-z]{5000}$"},
    {"enum": ["a" * 3000, "b" * 4000]},
    {"anyOf": [{"type": "string", "minLength": 3000}, {"type": "array", "minItems": 3000}]},
    {"$defs": {"big": {"type": "string", "minLength": 5000}}, "$ref": "#/$defs/big"},
]


def _format(schema: Any) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": schema}}


@pytest.mark.parametrize("schema", LONG)
def test_length_forcing_keywords_refuse_a_small_budget(serve: Any, schema: Any) -> None:
    live = serve("Hello there, world!")
    r = httpx.post(f"{live.url}/v1/chat/completions", timeout=60,
                   json={"messages": USER, "max_tokens": 20, "response_format": _format(schema)})
    assert r.status_code == 400, r.text[:300]
    error = r.json()["error"]
    assert error["code"] == "max_tokens_too_small" and error["param"] == "max_tokens"


DOORS = [
    ("/v1/chat/completions", {"messages": USER, "max_tokens": 20,
                              "guided_json": {"type": "array", "minItems": 100000}}, "max_tokens"),
    ("/v1/chat/completions", {"messages": USER, "max_completion_tokens": 20,
                              "guided_regex": "[0-9]{20000}"}, "max_completion_tokens"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 20,
                         "guided_json": {"type": "string", "minLength": 100000}}, "max_tokens"),
    ("/v1/responses", {"input": "hi", "max_output_tokens": 20, "text": {"format": {
        "type": "json_schema", "name": "x", "strict": True,
        "schema": {"type": "array", "minItems": 100000}}}},
     "max_output_tokens"),
]


@pytest.mark.parametrize(("path", "body", "param"), DOORS)
def test_every_door_checks_the_length_floor(serve: Any, path: str, body: dict[str, Any], param: str) -> None:
    live = serve("Hello there, world!")
    r = httpx.post(f"{live.url}{path}", json=body, timeout=60)
    assert r.status_code == 400, r.text[:300]
    error = r.json()["error"]
    assert error["code"] == "max_tokens_too_small" and error["param"] == param


def test_ollama_num_predict_is_checked(serve: Any) -> None:
    live = serve("Hello there, world!")
    r = httpx.post(f"{live.url}/api/chat", timeout=60, json={
        "model": "scripted", "messages": USER, "stream": False, "options": {"num_predict": 20},
        "format": {"type": "array", "minItems": 100000}})
    assert r.status_code == 400, r.text[:300]
    assert "num_predict" in r.json()["error"]


def test_a_budget_that_fits_is_served(serve: Any) -> None:
    live = serve('["a", "b", "c"]')
    r = httpx.post(f"{live.url}/v1/chat/completions", timeout=60, json={
        "messages": USER, "max_tokens": 60, "temperature": 0,
        "response_format": _format({"type": "array", "minItems": 3, "items": {"type": "string"}})})
    assert r.status_code == 200, r.text[:300]
    assert len(json.loads(r.json()["choices"][0]["message"]["content"])) >= 3


# -- the floor is a lower bound: never above a real instance's compact length -------------------

_LEAVES = st.sampled_from([{"type": "integer"}, {"type": "string", "minLength": 2}, {"type": "boolean"},
                           {"const": "abc"}, {"enum": ["x", "yy"]}, {"type": "null"}])


def _schemas() -> st.SearchStrategy[Any]:
    return st.recursive(_LEAVES, lambda inner: st.one_of(
        st.builds(lambda s, n: {"type": "array", "items": s, "minItems": n}, inner, st.integers(0, 3)),
        st.builds(lambda s: {"type": "object", "properties": {"k": s}, "required": ["k"]}, inner),
        st.builds(lambda a, b: {"anyOf": [a, b]}, inner, inner),
    ), max_leaves=6)


def _instance(schema: Any) -> Any:
    """A valid instance (the first branch of each anyOf)."""
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    if "anyOf" in schema:
        return _instance(schema["anyOf"][0])
    kind = schema["type"]
    if kind == "array":
        return [_instance(schema["items"]) for _ in range(schema["minItems"])]
    if kind == "object":
        return {"k": _instance(schema["properties"]["k"])}
    return {"integer": 7, "string": "ab", "boolean": True, "null": None}[kind]


@settings(max_examples=200, deadline=None)
@given(_schemas())
def test_the_floor_never_exceeds_an_instance(schema: Any) -> None:
    text = json.dumps(_instance(schema), separators=(",", ":"))
    assert min_json_bytes(schema) <= len(text.encode())


def test_pattern_floor_counts_repeats() -> None:
    assert min_pattern_chars("^[a-z]{300}$") == 300
    assert min_pattern_chars("(ab){2,}c?") == 4
    assert min_pattern_chars("\\p{L}+") == 0  # unreadable to Python: counted as nothing
