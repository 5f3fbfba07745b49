"""Each rewrite keeps the schema's meaning (jsonschema agrees on valid and invalid instances,
original vs rewritten) and brings it to the exact rung."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from afm_struct.grammar.schema.rewrites import rewrite_schema
from afm_struct.grammar.spec import JsonSchemaRequest, Mode

from ..decoding.randomized import examples

CASES: list[tuple[str, dict[str, Any], list[Any], list[Any]]] = [
    ("unique_items",  # five values: 326 unique arrays
     {"type": "array", "uniqueItems": True, "items": {"enum": ["a", "b", "c", "d", "e"]}},
     [[], ["a", "e", "c"], ["e", "d", "c", "b", "a"]], [["a", "a"], ["f"], ["a", "b", "a"]]),
    ("finite_values",  # a negation with no positive form, inside a listed domain
     {"allOf": [{"enum": ["1", 2, 2.5, None]}, {"not": {"type": "integer"}}]},
     ["1", 2.5, None], [2, "2", 3.5]),
    ("finite_values",  # const beside an existential over keys (no positive negation)
     {"const": {"a1": "x"}, "not": {"patternProperties": {"a": {"not": {"type": "string"}}}}},
     [{"a1": "x"}], [{"a1": 1}, {}]),
    ("finite_values",  # an asserted format decides values too
     {"$schema": "https://json-schema.org/draft/2020-12/schema",
      "enum": ["2020-01-01", "nope", 3], "format": "date", "not": {"type": "integer"}},
     ["2020-01-01"], [3, "x"]),  # "nope": valid only where formats do not assert
    ("oneof_disjoint",
     {"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
     ["a", 3, None], [1.5, True, [], {}]),
    ("oneof_disjoint",  # const discriminator on a required property
     {"oneOf": [
         {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}},
          "required": ["kind", "x"], "additionalProperties": False},
         {"type": "object", "properties": {"kind": {"enum": ["b", "c"]}, "y": {"type": "string"}},
          "required": ["kind"], "additionalProperties": False}]},
     [{"kind": "a", "x": 1}, {"kind": "b"}, {"kind": "c", "y": "s"}],
     [{"kind": "a"}, {"kind": "d"}, {"kind": "b", "x": 1}, "a"]),
    ("oneof_disjoint",  # a required property the other branch's closed list forbids
     {"oneOf": [
         {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"],
          "additionalProperties": False},
         {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"],
          "additionalProperties": False}]},
     [{"a": "x"}, {"b": "y"}], [{}, {"a": "x", "b": "y"}, {"a": 1}]),
    ("oneof_exclusive",  # exactly one of several required sets
     {"type": "object", "properties": {"a": {}, "b": {}, "c": {}},
      "oneOf": [{"required": ["a"]}, {"required": ["b", "c"]}]},
     [{"a": 1}, {"b": 1, "c": 2}, {"a": 1, "b": 2}, {"b": 1, "c": 2, "x": 0}],
     [{}, {"a": 1, "b": 2, "c": 3}, {"b": 1}]),
    ("oneof_exclusive", {"oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
     [{"a": 1}, {"b": 1}], [{"a": 1, "b": 1}, {}, "s", 3]),
    ("unknown_format", {"type": "string", "format": "mongoId", "maxLength": 4},
     ["abcd", ""], ["abcde", 3]),
    ("not_positive", {"type": ["string", "null", "integer"], "not": {"type": "null"}},
     ["x", 3], [None, 1.5, {}]),
    ("not_positive", {"not": {"type": "integer"}, "type": ["integer", "string"]}, ["x"], [1, None]),
    ("not_positive", {"type": "object", "properties": {"a": {}, "b": {}}, "not": {"required": ["a", "b"]}},
     [{}, {"a": 1}, {"b": 1}], [{"a": 1, "b": 2}, "s"]),
    ("not_positive", {"not": {"minimum": 3}}, [2, 2.99, -1], [3, 4, "a", None]),
    ("not_positive", {"not": {"maxLength": 2}}, ["abc"], ["ab", "", 1]),
    ("not_positive", {"not": {"anyOf": [{"type": "string"}, {"type": "boolean"}]}},
     [1, None, {}, []], ["s", True]),
    ("not_positive", {"type": "integer", "not": False}, [1, 0], ["a", None]),
    ("dependencies",
     {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
      "properties": {"card": {"type": "string"}, "zip": {"type": "string"}},
      "dependencies": {"card": ["zip"]}},
     [{}, {"zip": "1"}, {"card": "x", "zip": "1"}], [{"card": "x"}, {"card": "x", "zip": 1}]),
    ("dependencies",
     {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
      "dependentSchemas": {"a": {"required": ["b"], "properties": {"b": {"minimum": 10}}}}},
     [{}, {"b": 1}, {"a": 1, "b": 10}], [{"a": 1}, {"a": 1, "b": 9}]),
    ("min_max_properties",
     {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
      "additionalProperties": False, "minProperties": 1, "maxProperties": 2},
     [{"a": 1}, {"b": 2}, {"a": 1, "b": 2}], [{}, {"c": 1}]),
    ("ref_siblings",  # draft 7 ignores keywords next to $ref (llguidance would intersect them)
     {"$schema": "http://json-schema.org/draft-07/schema#",
      "definitions": {"p": {"type": ["string", "object"]}},
      "properties": {"s": {"$ref": "#/definitions/p", "enum": ["key", "sas"], "description": "d"}}},
     [{"s": {"key": "x"}}, {"s": "other"}, {}], [{"s": 3}, {"s": None}]),
    ("oneof_exclusive",  # {"a":1,"b":"x"} matches both branches, {"a":1,"b":2} only one
     {"oneOf": [{"required": ["a"], "properties": {"b": {"type": "string"}}}, {"required": ["b"]}]},
     [{"a": 1, "b": 2}, {"a": 1}, {"b": 2}], [{"a": 1, "b": "x"}, {}]),
    ("oneof_exclusive",  # {} matches both branches
     {"oneOf": [{"type": "object", "properties": {"k": {"const": 1}}},
                {"type": "object", "properties": {"k": {"const": 2}}}]},
     [{"k": 1}, {"k": 2}], [{}, {"x": 0}, {"k": 3}, 1]),
    ("not_positive",  # a type name that is not a primitive (o11666): seven words, one regex
     {"type": "string",
      "not": {"enum": ["boolean", "integer", "number", "string", "array", "object", "null"]}},
     ["bool", "Object", "", "nulls", "x"], ["boolean", "null", "array", 1]),
    ("not_positive", {"not": {"pattern": "^a"}}, ["b", "", "ba"], ["a", "ab", 1, None]),
    ("noop_keyword", {"type": "array", "items": {"type": "integer"}, "uniqueItems": False,
                      "additionalItems": False},
     [[], [1, 1]], [["a"], "x"]),
]


@pytest.mark.parametrize(("name", "schema", "valid", "invalid"), CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_rewrite_is_equivalent_and_exact(compiler, name: str, schema: dict[str, Any],  # type: ignore[no-untyped-def]
                                         valid: list[Any], invalid: list[Any]) -> None:
    result = rewrite_schema(schema)
    assert name in result.applied
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    original, rewritten = cls(schema), cls(result.schema)
    for instance in valid:
        assert original.is_valid(instance), instance  # the case itself is right
        assert rewritten.is_valid(instance), (instance, result.schema)
    for instance in invalid:
        assert not original.is_valid(instance), instance
        assert not rewritten.is_valid(instance), (instance, result.schema)
    compiled = compiler.compile(JsonSchemaRequest(schema))
    assert compiled.mode is Mode.ENFORCED, compiled.reason
    assert name in compiled.rewrites


def test_rewrites_are_pure() -> None:
    schema = {"oneOf": [{"type": "string"}, {"type": "integer"}], "format": "whatever"}
    before = repr(schema)
    rewrite_schema(schema)
    assert repr(schema) == before


@pytest.mark.parametrize("schema", [
    {"oneOf": [{"type": "integer"}, {"type": "number"}]},  # 1 matches both
    {"not": {"type": "integer"}},  # 1.5 is allowed, integers are not: no positive form
    {"not": {"multipleOf": 3}},  # no positive form for "not a multiple"
    {"type": "array", "uniqueItems": True, "items": {"type": "string"}},  # infinite item domain
])
def test_unprovable_cases_are_left_alone(schema: dict[str, Any]) -> None:
    result = rewrite_schema(schema)
    assert result.applied == ()
    assert result.schema == schema


def test_ref_into_a_rewritten_keyword_blocks_the_rewrite() -> None:
    schema = {"properties": {"a": {"oneOf": [{"type": "string"}, {"type": "null"}]},
                             "b": {"$ref": "#/properties/a/oneOf/0"}}}
    result = rewrite_schema(schema)
    assert "oneOf" in result.schema["properties"]["a"]
    jsonschema.Draft202012Validator(result.schema).validate({"a": None, "b": "x"})


def test_draft4_bounds_use_boolean_exclusive() -> None:
    schema = {"$schema": "http://json-schema.org/draft-04/schema#", "not": {"minimum": 3}}
    result = rewrite_schema(schema)
    v = jsonschema.Draft4Validator(result.schema)
    assert v.is_valid(2) and not v.is_valid(3) and not v.is_valid("a")


# Random instances on top of the hand-picked ones: objects over the keys the cases use, so the
# interesting regions (present/absent/duplicated constraints) are hit often.
_KEYS = st.sampled_from(["a", "b", "c", "x", "kind", "card", "zip", "s", "name"])
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-20, 20), st.floats(-20, 20, allow_nan=False),
                     st.sampled_from(["", "a", "ab", "abc", "key", "sas", "b", "c", "d", "x"]))
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(_KEYS, inner, max_size=4)), max_leaves=8)


@pytest.mark.parametrize(("name", "schema"), [(c[0], c[1]) for c in CASES],
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
# 40 instances per case in ``make test`` (it was 150: 26 cases made this the suite's second
# longest file); ``make fuzz`` runs it with ``AFM_STRUCT_RANDOM_EXAMPLES=200``.
@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instance=_VALUES)
def test_rewrite_agrees_on_random_instances(name: str, schema: dict[str, Any], instance: Any) -> None:
    rewritten = rewrite_schema(schema).schema
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    assert cls(schema).is_valid(instance) == cls(rewritten).is_valid(instance), (instance, rewritten)


def test_finite_values_leaves_a_node_another_reference_points_into() -> None:
    # `#/properties/a/allOf/0` is referenced from elsewhere: replacing node `a` by its listed
    # values would leave that pointer dangling, so `a` keeps its keywords.
    schema = {"properties": {"a": {"allOf": [{"enum": [1, "x"]}, {"not": {"type": "integer"}}]},
                             "b": {"$ref": "#/properties/a/allOf/0"}}}
    result = rewrite_schema(schema)
    assert result.schema["properties"]["a"]["allOf"][0] == {"enum": [1, "x"]}
    root = rewrite_schema({"allOf": [{"enum": [1, "x"]}, {"not": {"type": "integer"}}]})
    assert root.schema == {"enum": ["x"]} and "finite_values" in root.applied
