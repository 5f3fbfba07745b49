"""Every rewrite keeps the schema's meaning, checked with jsonschema as the oracle.

* Per rewrite, hypothesis draws schemas shaped to trigger it and instances around them: the
  original and the rewritten schema get the same verdict on every instance.
* On the shared dev set, every test instance of every schema a rewrite changes gets the same
  verdict from both (a spread of the files; ``AFM_STRUCT_DEV_EVERY=1`` checks all of them).

Known, safe difference: rewritten patterns are anchored ``^(?:…)$`` and the engine reads ``$``
as the end of the text, while Python's ``$`` also matches before a final newline; so jsonschema
reading a *rewritten* pattern may accept a string ending in ``\\n`` that the original rejects
(the engine does not: see ``test_regular.py``).  Instances holding such a string are left out
of the jsonschema comparison.

``AFM_STRUCT_RANDOM_EXAMPLES=N`` runs N examples per rewrite instead of the CI-sized default.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from afm_struct.grammar.schema.drafts import validator_class
from afm_struct.grammar.schema.rewrites import REGISTRY, rewrite_schema

from .conftest import SHARED
from .schema_strategies import EXAMPLES, INSTANCES, KEYS, PATTERNS, SCALARS, leaf, with_type

DEV_EVERY = int(os.environ.get("AFM_STRUCT_DEV_EVERY", "0")) or 16

@st.composite
def _not(draw: Any) -> Any:
    return with_type(draw, {"not": draw(leaf())})


@st.composite
def _if(draw: Any) -> Any:
    node: dict[str, Any] = {"if": draw(leaf())}
    for key in draw(st.sampled_from([["then"], ["else"], ["then", "else"]])):
        node[key] = draw(leaf())
    return with_type(draw, node)


@st.composite
def _one_of(draw: Any) -> Any:
    return with_type(draw, {"oneOf": draw(st.lists(leaf(), min_size=2, max_size=3))})


@st.composite
def _one_of_disjoint(draw: Any) -> Any:
    # Branches of distinct types (with whatever else leaf() adds): provably disjoint mostly.
    types = draw(st.lists(st.sampled_from(["string", "integer", "boolean", "null", "object", "array"]),
                          min_size=2, max_size=3, unique=True))
    return with_type(draw, {"oneOf": [{**draw(leaf()), "type": t} for t in types]})


@st.composite
def _unique(draw: Any) -> Any:
    items = draw(st.one_of(
        st.builds(lambda vs: {"enum": vs}, st.lists(SCALARS, min_size=1, max_size=4, unique_by=json.dumps)),
        st.just({"type": "boolean"}), st.just({"type": ["boolean", "null"]}),
        st.builds(lambda lo: {"type": "integer", "minimum": lo, "maximum": lo + 2}, st.integers(-2, 2))))
    node: dict[str, Any] = {"type": "array", "uniqueItems": True, "items": items}
    if draw(st.booleans()):
        node["maxItems"] = draw(st.integers(0, 3))
    if draw(st.booleans()):
        node["minItems"] = draw(st.integers(0, 2))
    return node


@st.composite
def _contains(draw: Any) -> Any:
    node: dict[str, Any] = {"type": draw(st.sampled_from(["array", ["array", "string"]])),
                            "contains": draw(leaf()), "maxItems": draw(st.integers(0, 4))}
    if draw(st.booleans()):
        node["minContains"] = draw(st.integers(0, 3))
    return node


@st.composite
def _min_max_properties(draw: Any) -> Any:
    keys = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True))
    node: dict[str, Any] = {"type": "object", "properties": {k: draw(leaf()) for k in keys}}
    req = draw(st.lists(st.sampled_from(keys), max_size=2, unique=True))
    if req:
        node["required"] = req
    if draw(st.booleans()):
        node["additionalProperties"] = False
    bounds = [["minProperties"], ["maxProperties"], ["minProperties", "maxProperties"]]
    for key in draw(st.sampled_from(bounds)):
        node[key] = draw(st.integers(0, 3))
    return node


@st.composite
def _property_names(draw: Any) -> Any:
    names = draw(st.one_of(
        st.builds(lambda p: {"pattern": p}, st.sampled_from(PATTERNS)),
        st.builds(lambda v: {"maxLength": v}, st.integers(0, 2)),
        st.builds(lambda vs: {"enum": vs},
                  st.lists(st.sampled_from([*KEYS, "x", "@@"]), min_size=1, max_size=3)),
        st.builds(lambda p: {"not": {"pattern": p}}, st.sampled_from(PATTERNS))))
    node: dict[str, Any] = {"type": "object", "propertyNames": names}
    if draw(st.booleans()):
        node["properties"] = {draw(st.sampled_from(KEYS)): draw(leaf())}
    if draw(st.booleans()):
        node["additionalProperties"] = draw(leaf())
    return node


@st.composite
def _pattern_properties(draw: Any) -> Any:
    patterns = draw(st.lists(st.sampled_from(PATTERNS), min_size=1, max_size=3, unique=True))
    node: dict[str, Any] = {"type": "object", "patternProperties": {p: draw(leaf()) for p in patterns}}
    if draw(st.booleans()):
        node["additionalProperties"] = draw(st.sampled_from([False, {"type": "integer"}]))
    return node


@st.composite
def _regular_pattern(draw: Any) -> Any:
    pattern = draw(st.sampled_from(["^(?!a)[a-z]*$", "(a|$)", "^(?!@@)[\\w@]+$", "^(?=.*1)",
                                    "^(?!.*@)", "(^a|b$)", "^(?=[ab])(?!ab)"]))
    return with_type(draw, {"pattern": pattern})


@st.composite
def _dependencies(draw: Any) -> Any:
    key = draw(st.sampled_from(["dependentRequired", "dependentSchemas"]))
    if key == "dependentRequired":
        value = {k: draw(st.lists(st.sampled_from(KEYS), max_size=2, unique=True)) for k in
                 draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=2, unique=True))}
    else:
        value = {draw(st.sampled_from(KEYS)): draw(leaf())}
    return with_type(draw, {key: value})


@st.composite
def _ref_siblings(draw: Any) -> Any:
    return {"$schema": "http://json-schema.org/draft-07/schema#", "definitions": {"d": draw(leaf())},
            "properties": {"a": {"$ref": "#/definitions/d", **draw(leaf())}}}


@st.composite
def _noop(draw: Any) -> Any:
    node = draw(leaf())
    extra = draw(st.sampled_from([{"uniqueItems": False}, {"if": {"type": "string"}},
                                  {"then": {"type": "string"}}, {"minContains": 2},
                                  {"type": "string", "uniqueItems": True, "propertyNames": {"maxLength": 1}},
                                  {"items": {"type": "string"}, "additionalItems": False}]))
    return {**node, **extra}


@st.composite
def _finite(draw: Any) -> Any:
    listed = draw(st.sampled_from([
        {"enum": draw(st.lists(INSTANCES, min_size=1, max_size=6, unique_by=json.dumps))},
        {"const": draw(INSTANCES)}]))
    other = {"not": draw(leaf())}
    if draw(st.booleans()):
        return with_type(draw, {**other, **listed})
    return {"allOf": [listed, other]}


@st.composite
def _formats(draw: Any) -> Any:
    return {"type": "string", "format": draw(st.sampled_from(["made-up", "date", "uuid", "email"]))}


STRATEGIES: dict[str, Any] = {
    "ref_siblings": _ref_siblings(), "noop_keyword": _noop(), "unknown_format": _formats(),
    "exact_format": _formats(), "regular_pattern": _regular_pattern(), "dependencies": _dependencies(),
    "pattern_properties": _pattern_properties(), "property_names": _property_names(),
    "min_max_properties": _min_max_properties(), "unique_items": _unique(), "contains": _contains(),
    "not_positive": _not(), "finite_values": _finite(), "if_then_else": _if(),
    "oneof_disjoint": _one_of_disjoint(),
    "oneof_exclusive": _one_of(),
}


def test_every_rewrite_has_a_generator() -> None:
    assert set(STRATEGIES) == set(REGISTRY)


def trailing_newline(value: Any) -> bool:
    """True when some string in ``value`` (key or value) ends in a newline."""
    if isinstance(value, str):
        return value.endswith("\n")
    if isinstance(value, list):
        return any(trailing_newline(v) for v in value)
    if isinstance(value, dict):
        return any(trailing_newline(k) or trailing_newline(v) for k, v in value.items())
    return False


def assert_same_verdicts(schema: Any, rewritten: Any, instances: list[Any]) -> None:
    """jsonschema (format-asserting) gives ``schema`` and ``rewritten`` the same verdicts."""
    cls = validator_class(schema)
    original = cls(schema, format_checker=cls.FORMAT_CHECKER)
    new = cls(rewritten, format_checker=cls.FORMAT_CHECKER)
    for instance in instances:
        if trailing_newline(instance):
            continue
        assert original.is_valid(instance) == new.is_valid(instance), (instance, rewritten)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_rewrite_keeps_the_meaning(name: str, data: Any) -> None:
    schema = data.draw(STRATEGIES[name], label="schema")
    result = rewrite_schema(schema)
    assume(name in result.applied)
    instances = data.draw(st.lists(INSTANCES, min_size=5, max_size=25), label="instances")
    assert_same_verdicts(schema, result.schema, instances)


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"JSONSchemaBench dev set not present at {SHARED}")
def test_rewrites_agree_on_the_dev_set() -> None:
    fired: set[str] = set()
    for path in sorted(SHARED.glob("*.json"))[::DEV_EVERY]:
        case = json.loads(path.read_text())
        schema = case["schema"]
        # exact_format's patterns are stricter than jsonschema's checkers for some formats on
        # purpose (docs/constraints.md, "Formats"); its own tests are tests/grammar/test_formats.py.
        result = _without_exact(schema)
        if not result.applied:
            continue
        fired.update(result.applied)
        try:
            validator_class(schema).check_schema(schema)
        except Exception:  # not a valid schema: the compiler refuses it before any rewrite
            continue
        assert_same_verdicts(schema, result.schema, [t["data"] for t in case["tests"]])
    assert len(fired) >= 8, fired


def _without_exact(schema: Any) -> Any:
    saved = REGISTRY["exact_format"]
    REGISTRY["exact_format"] = (lambda node, original, ctx: None, saved[1])
    try:
        return rewrite_schema(schema)
    finally:
        REGISTRY["exact_format"] = saved



@pytest.mark.skipif(not SHARED.is_dir(), reason=f"JSONSchemaBench dev set not present at {SHARED}")
def test_a_rewrite_the_engine_cannot_take_falls_back_to_the_original(compiler) -> None:  # type: ignore[no-untyped-def]
    # Negating three nested `anyOf`s of patterns leaves llguidance unable to decide whether the
    # intersection is empty: the original's relaxed rung (which drops `not`) serves instead of
    # generic JSON, and says why.
    from afm_struct.grammar.spec import JsonSchemaRequest, Rung

    schema = json.loads((SHARED / "Handwritten---allany14.json").read_text())["schema"]
    assert "not_positive" in rewrite_schema(schema).applied
    compiled = compiler.compile(JsonSchemaRequest(schema))
    assert compiled.rung is Rung.RELAXED, (compiled.rung, compiled.reason)
    assert compiled.reason == "unsupported_keyword:not"
