"""``not S`` as a positive schema (grammar/schema/negation.py): where the negator answers, its schema
accepts exactly the values S rejects (jsonschema as the oracle), in each draft's reading."""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from afm_struct.grammar.schema.negation import ATOMS, Negator

from .schema_strategies import EXAMPLES, INSTANCES, leaf

_DRAFTS = {0: jsonschema.Draft202012Validator, 4: jsonschema.Draft4Validator,
           7: jsonschema.Draft7Validator}


def _negator(draft: int) -> Negator:
    # No references to follow; the positive copies are checked by jsonschema as they are.
    return Negator(draft, lambda ref, allowed, keys: None, lambda schema: schema)


@pytest.mark.parametrize("draft", sorted(_DRAFTS))
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(schema={"enum": [0]}, instances=[0, 1, -1, 0.5, None])  # draft 4: exclusive bounds are booleans
@example(schema={"exclusiveMaximum": 0}, instances=[0, 1, -1])  # a number there means nothing in draft 4
@example(schema={"const": False, "enum": [None]}, instances=[None, False, True, 0])  # both: two conjuncts
@example(schema={"enum": [False]}, instances=[None, False, True])  # draft 4 reads no const in the negation
@example(schema={"enum": [[1, 2]]}, instances=[[1, 2], [1, 3], [1], None])  # nor in an item's
@given(schema=leaf(), instances=st.lists(INSTANCES, min_size=5, max_size=20))
def test_negation_accepts_exactly_the_rejected_values(draft: int, schema: Any, instances: list[Any]) -> None:
    negated = _negator(draft).negate(schema, ATOMS)
    if negated is None:  # no positive form: the rewrite keeps `not` and the ladder downgrades
        return
    cls = _DRAFTS[draft]
    original, negation = cls(_spelled(schema, draft)), cls(_spelled(negated, draft))
    for instance in instances:
        assert negation.is_valid(instance) == (not original.is_valid(instance)), (instance, negated)


def _spelled(schema: Any, draft: int) -> Any:
    """Boolean subschemas as draft 4 spells them (it has none; the engine takes them as such).
    Only subschema positions: ``exclusiveMaximum: true`` is a draft-4 keyword value."""
    if draft != 4:
        return schema
    if schema is True:
        return {}
    if schema is False:
        return {"not": {}}
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in ("not", "items", "additionalProperties", "additionalItems"):
        if key in out:
            out[key] = ([_spelled(v, draft) for v in out[key]] if isinstance(out[key], list)
                        else _spelled(out[key], draft))
    for key in ("allOf", "anyOf", "oneOf"):
        if isinstance(out.get(key), list):
            out[key] = [_spelled(v, draft) for v in out[key]]
    for key in ("properties", "patternProperties"):
        if isinstance(out.get(key), dict):
            out[key] = {k: _spelled(v, draft) for k, v in out[key].items()}
    return out


@pytest.mark.parametrize(("schema", "allowed", "valid", "invalid"), [
    ({"required": ["a"]}, ATOMS, [{}, {"b": 1}], [{"a": 1}, 3, "s"]),  # only objects can lack a key
    ({"type": "string"}, ATOMS, [1, None, [], {}], ["s"]),
    ({"enum": ["a", 1]}, ATOMS, ["b", 2, 1.5, None, True, [], {}], ["a", 1]),
    ({"const": [1, 2]}, ATOMS, [[1], [2, 1], [1, 2, 3], 1], [[1, 2]]),
    ({"minLength": 2, "pattern": "^a"}, frozenset({"string"}), ["a", "ba", ""], ["ab", "abc"]),
    ({"properties": {"a": {"type": "string"}}}, frozenset({"object"}), [{"a": 1}], [{}, {"a": "x"}]),
    # "some item is not a string": contains (the any-order grammar writes it; llguidance's JSON
    # compiler refuses it, so schema order still downgrades)
    ({"items": {"type": "string"}}, ATOMS, [[1], ["a", None]], [[], ["a", "b"], 3, {}]),
    # at most one key: "some key breaks additionalProperties" needs no list of keys
    ({"type": "object", "additionalProperties": {"const": False}, "minProperties": 1, "maxProperties": 1},
     ATOMS, [{}, {"a": True}, {"a": False, "b": False}, {"b": 0}, 1, []], [{"a": False}, {"z": False}]),
])
def test_common_forms(schema: Any, allowed: frozenset[str], valid: list[Any], invalid: list[Any]) -> None:
    negated = _negator(0).negate(schema, allowed)
    assert negated is not None
    check = jsonschema.Draft202012Validator(negated)
    assert all(check.is_valid(v) for v in valid), negated
    assert not any(check.is_valid(v) for v in invalid), negated


@pytest.mark.parametrize("schema", [
    {"type": "integer"},  # "a number that is not an integer": no positive form
    {"multipleOf": 2},
    {"uniqueItems": True},
    {"additionalProperties": False, "properties": {"a": {}}},  # "some key is undeclared"
    {"type": "string", "format": "date"},  # the grammar's date is stricter than the checker's
])
def test_no_positive_form_answers_none(schema: Any) -> None:
    assert _negator(0).negate(schema, ATOMS) is None


@settings(max_examples=EXAMPLES, deadline=None)
@example(words=["boolean", "integer", "number", "string", "array", "object", "null"],
         texts=["bool", "Object", "", "nulls", "integers"])
@given(words=st.lists(st.text("ab\n", max_size=4), min_size=1, max_size=6),
       texts=st.lists(st.text("abc\n", max_size=6), max_size=10))
def test_not_an_enum_of_strings_is_every_other_string(words: list[str], texts: list[str]) -> None:
    # `not: {enum: [...]}` over strings: exact however many values (the complement automaton's
    # regex used to pass the size bound at five words, and the keyword stayed unenforced).
    negated = _negator(0).negate({"enum": words}, frozenset({"string"}))
    assert negated is not None
    pattern = negated["pattern"]
    assert pattern.startswith("^(?:") and pattern.endswith(")$")
    for text in [*words, *texts]:
        assert bool(re.fullmatch(pattern[1:-1], text)) == (text not in words), (pattern, text)

