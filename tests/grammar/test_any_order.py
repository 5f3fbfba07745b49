"""Objects in any property order (``property_order="any"``): exact against jsonschema.

Each schema below is compiled through the whole compiler; every key order of every instance is
walked through the grammar and must be accepted exactly when jsonschema says the instance is
valid (the grammar may not accept an invalid instance, and here it must accept every valid one).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import jsonschema
import pytest

from afm_struct.errors import InvalidRequestError
from afm_struct.grammar.compiler import ConstraintCompiler
from afm_struct.grammar.engines.any_order import any_order_grammar
from afm_struct.grammar.engines.llguidance_engine import json_options
from afm_struct.grammar.schema.rewrites import rewrite_schema
from afm_struct.grammar.spec import CompileOptions, JsonSchemaRequest, Mode

ZIP = {"type": "string", "pattern": "^[0-9]{5}$"}
ADDRESS = {"type": "object", "properties": {"street": {"type": "string"}, "zip": ZIP},
           "required": ["zip"], "additionalProperties": False}
TAGS = {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}
INT, BOOL = {"type": "integer"}, {"type": "boolean"}
NODE = {"type": "object", "x-vendor": {"a": 1},
        "properties": {"value": {"type": "number"},
                       "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "required": ["value"], "additionalProperties": False}

CASES: list[tuple[dict[str, Any], list[Any]]] = [
    # required + optional + open extras, a nested object through $ref, a bounded array, an enum
    ({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                       "tags": TAGS,
                                       "home": {"$ref": "#/definitions/address"}},
      "required": ["name", "age"], "definitions": {"address": ADDRESS}},
     [{"name": "x", "age": 3},
      {"name": "x", "age": 3, "tags": ["a"], "home": {"zip": "12345", "street": "s"}},
      {"name": "x", "age": 3, "extra": [1, {"k": None}]}, {"name": "x"}, {"name": "x", "age": "3"},
      {"name": "x", "age": 3, "tags": ["a", "b", "a"]}, {"name": "x", "age": 3, "tags": ["c"]},
      {"name": "x", "age": 3, "home": {"zip": "1234"}},
      {"name": "x", "age": 3, "home": {"zip": "12345", "q": 1}},
      {"name": "x", "age": 3.5}, {}]),
    # presence logic (what the dependencies / oneOf rewrites produce): b needs c; exactly one of x, y
    ({"type": "object", "properties": {"b": INT, "c": INT, "x": BOOL, "y": BOOL},
      "additionalProperties": False,
      "allOf": [{"anyOf": [{"properties": {"b": False}}, {"required": ["b", "c"]}]}],
      "oneOf": [{"required": ["x"]}, {"required": ["y"]}]},
     [{"x": True}, {"y": False, "b": 1, "c": 2}, {"x": True, "b": 1}, {"x": True, "y": True}, {},
      {"c": 1, "y": True}, {"x": True, "z": 1}]),
    # one patternProperties entry next to declared keys, closed otherwise
    ({"type": "object", "properties": {"version": {"type": "string"}, "x-id": {"type": "string"}},
      "patternProperties": {"^x-": {"type": "string", "maxLength": 3}}, "additionalProperties": False},
     [{"version": "1", "x-a": "ab"}, {"x-a": "abcd"}, {"version": "1", "other": "v"}, {"x-id": "abc"},
      {"x-id": "abcd"}, {"x-b": "z", "x-c": "y", "version": "2"}]),
    # enums and consts with a "type" keep only the values of that type
    ({"type": "object", "properties": {"kind": {"type": "string", "enum": ["zip", 1, None]},
                                       "n": {"type": "integer", "const": 2}}, "additionalProperties": False},
     [{"kind": "zip", "n": 2}, {"n": 2, "kind": "zip"}, {"kind": 1}, {"kind": None}, {"n": 3}, {"n": "2"}]),
    # no "type": the object rule applies to objects only; other values stay valid
    ({"properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["a"]},
     [{"a": 1, "b": "s"}, {"b": "s"}, [1, 2], "text", 3, None, {"a": "1"}]),
    # a pattern with "/" (it ends a Lark regex literal unless escaped): was left in schema order
    ({"type": "object", "patternProperties": {"^/(([^/]+/)*[^/]+)?$": {"type": ["string", "null"]}},
      "properties": {"_order": {"type": "object"}}, "additionalProperties": False},
     [{"/a": "x", "_order": {}}, {"/a/b": None, "/c": "y", "_order": {}}, {"/a/": None}, {"a/b": None},
      {"/a": 1}, {"_order": 1}]),
    # shared properties next to an anyOf of whole objects (a oneOf rewritten): one object per branch
    ({"type": "object", "properties": {"shape": {"enum": ["circle", "square"]}, "radius": {"type": "number"},
                                       "side": {"type": "number"}},
      "anyOf": [{"properties": {"shape": {"const": "circle"}}, "required": ["shape", "radius"]},
                {"$ref": "#/$defs/square"}],
      "$defs": {"square": {"properties": {"shape": {"const": "square"}, "side": {"minimum": 0}},
                           "required": ["shape", "side"], "additionalProperties": False}}},
     [{"shape": "circle", "radius": 1, "side": 2}, {"shape": "square", "side": 2},
      {"shape": "square", "side": 2, "radius": 1}, {"shape": "square", "side": -1}, {"shape": "circle"},
      {"shape": "triangle", "radius": 1}, {"shape": "circle", "radius": "1"},
      {"shape": "circle", "radius": 1, "x": 0}]),
    # a oneOf of objects told apart by required keys: "branch 1 and not branch 2" needs "some item
    # of tags is not a string" (draft 7: contains; draft 4, which lacks it: not/items/not)
    *[({"$schema": f"http://json-schema.org/draft-0{d}/schema#", "type": "object",
        "oneOf": [{"properties": {"tags": {"type": "array", "items": {"type": "string"}}},
                   "required": ["tags"]},
                  {"properties": {"name": {"type": "string"}}, "required": ["name"]}]},
       [{"tags": ["a"]}, {"name": "x"}, {"tags": ["a"], "name": "x"}, {"tags": [1], "name": "x"},
        {"tags": ["a", 2, "b"], "name": "x"}, {"tags": [1]}, {"name": 1}, {}, {"tags": [], "name": "x"}])
      for d in (4, 7)],
    # no object satisfies it (a required key whose schema is false): llguidance reads the
    # condition `not(true)` as true, which let such objects close with any keys
    ({"properties": {"a": False, "b": INT, "c": INT}, "required": ["a"]},
     [{"b": 1, "c": 2}, {"c": 2}, {"a": 1}, {}, 3, "s", None]),
    # extra keys JSON escapes (a quote, a backslash, a newline) next to a declared one that does
    ({"type": "object", "properties": {"a": INT, 'q"': {"type": "string"}}, "required": ["a"]},
     [{"a": 1, "s\\": 2}, {"a": 1, "n\nl": 0}, {"a": 1, 'q"': "s"}, {"a": 1, 'q"': 1}, {"a": "x"}]),
    # a presence formula naming a key whose schema is false (it had no bit: a KeyError)
    ({"type": "object", "properties": {"a": INT, "b": False, "c": {}},
      "anyOf": [{"required": ["b"]}, {"required": ["a"]}]},
     [{"a": 1}, {"a": 1, "c": 2}, {"c": 1}, {"b": 1}, {"b": 1, "a": 1}]),
    # no "type": the applicators hold for other types too (a oneOf of two always-true branches
    # is false for every value: a non-object value was accepted)
    ({"properties": {"a": {}, "ab": {}, "abc": {"required": ["a", "ab"], "oneOf": [{}, {}]}}},
     [{"abc": False}, {"abc": {}}, {}, {"a": 1, "ab": 2}]),
    # recursion through $ref and vendor keywords (ignored, as JSON Schema says)
    ({"$ref": "#/$defs/node", "$defs": {"node": NODE}},
     [{"value": 1, "children": [{"value": 2.5, "children": []}]}, {"children": [], "value": 0},
      {"value": 1, "children": [{"children": []}]}, {"value": "1"}]),
]


def _accepts(constraint: Any, tokenizer: Any, text: str) -> bool:
    m = constraint.new_matcher()
    return all(m.advance(t) for t in tokenizer.encode(text)) and m.is_accepting()


def _orders(value: Any) -> list[Any]:
    """The instance with its top-level keys in every order (at most 24)."""
    if not isinstance(value, dict):
        return [value]
    return [dict(p) for p in itertools.islice(itertools.permutations(value.items()), 24)]


@pytest.fixture(scope="module")
def any_order(tokenizer) -> ConstraintCompiler:  # type: ignore[no-untyped-def]
    return ConstraintCompiler(tokenizer, CompileOptions(property_order="any"))


@pytest.mark.parametrize("case", range(len(CASES)))
def test_any_order_grammar_is_exact(any_order, tokenizer, case: int) -> None:  # type: ignore[no-untyped-def]
    schema, instances = CASES[case]
    rewritten = rewrite_schema(schema).schema  # what the compiler translates
    assert any_order_grammar(rewritten, json_options(CompileOptions())) is not None  # the Lark path runs
    constraint = any_order.compile(JsonSchemaRequest(schema))
    assert constraint.mode is Mode.ENFORCED
    validator = jsonschema.validators.validator_for(schema)(schema)
    valid_seen = invalid_seen = 0
    for instance in instances:
        for variant in _orders(instance):
            text = json.dumps(variant, ensure_ascii=False)
            expected = validator.is_valid(variant)
            valid_seen += expected
            invalid_seen += not expected
            assert _accepts(constraint, tokenizer, text) == expected, text
    assert valid_seen and invalid_seen


def test_schema_order_is_the_default_and_rejects_other_orders(tokenizer, compiler) -> None:  # type: ignore[no-untyped-def]
    schema, _ = CASES[0]
    reordered = json.dumps({"age": 3, "name": "x"})
    assert compiler.options.property_order == "schema"
    assert not _accepts(compiler.compile(JsonSchemaRequest(schema)), tokenizer, reordered)
    loose = ConstraintCompiler(tokenizer, CompileOptions(property_order="any"))
    assert _accepts(loose.compile(JsonSchemaRequest(schema)), tokenizer, reordered)


def test_unknown_property_order_is_a_typed_error(tokenizer) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidRequestError):
        ConstraintCompiler(tokenizer, CompileOptions(property_order="sorted"))  # type: ignore[arg-type]


def test_nothing_to_reorder_compiles_the_json_schema_itself() -> None:
    options = json_options(CompileOptions())
    assert any_order_grammar({"type": "object", "properties": {"a": {"type": "string"}},
                              "additionalProperties": False}, options) is None
    assert any_order_grammar({"type": "string"}, options) is None
    # a $ref that leaves the document cannot be carried into an embedded leaf
    assert any_order_grammar({"type": "object", "properties": {"a": {"$ref": "other.json#/x"}, "b": {}}},
                             options) is None


def test_schema_order_falls_back_to_the_exact_any_order_grammar(tokenizer, compiler) -> None:  # type: ignore[no-untyped-def]
    # llguidance's JSON compiler has no `contains`: in schema order the exact rung now takes the
    # any-order grammar (exact as well) instead of downgrading to the relaxed rung, which
    # accepted arrays without the item.
    schema = {"type": "object", "required": ["xs"],
              "properties": {"xs": {"type": "array", "items": {"type": "integer"}, "contains": {"const": 3}}}}
    constraint = compiler.compile(JsonSchemaRequest(schema))
    assert constraint.mode is Mode.ENFORCED, constraint.reason
    validator = jsonschema.validators.validator_for(schema)(schema)
    for instance in ({"xs": [3]}, {"xs": [1, 3, 2]}, {"xs": []}, {"xs": [1, 2]}, {"xs": [3, "a"]}, {}):
        text = json.dumps(instance)
        assert _accepts(constraint, tokenizer, text) == validator.is_valid(instance), text


def test_an_object_left_in_schema_order_downgrades_any_order(tokenizer, any_order, compiler) -> None:  # type: ignore[no-untyped-def]
    # Two patternProperties entries: the translation leaves the inner object a %json leaf, where
    # llguidance takes "a" before "b" only; in any order that is not exact, so it says so, and
    # the relaxed rung serves the any-order grammar (the outer object still free, never an
    # invalid instance). Schema order is exact as before.
    inner = {"type": "object", "properties": {"a": INT, "b": {"type": "string"}},
             "patternProperties": {"^x": INT, "^y": BOOL}}
    schema = {"type": "object", "properties": {"inner": inner, "c": INT}, "required": ["c"],
              "additionalProperties": False}
    constraint = any_order.compile(JsonSchemaRequest(schema))
    assert (constraint.mode, constraint.reason) == (Mode.DOWNGRADED, "property_order_fixed")
    assert _accepts(constraint, tokenizer, json.dumps({"c": 1, "inner": {"a": 1, "b": "s"}}))
    for invalid in ({"inner": {"a": 1}}, {"c": "1"}, {"c": 1, "inner": {"x1": "s"}}, {"c": 1, "d": 2}):
        assert not _accepts(constraint, tokenizer, json.dumps(invalid)), invalid
    assert compiler.compile(JsonSchemaRequest(schema)).mode is Mode.ENFORCED
    # The same object alone: nothing the grammar could free, the JSON Schema's grammar, downgraded.
    assert any_order.compile(JsonSchemaRequest(inner)).reason == "property_order_fixed"


@pytest.mark.parametrize("schema", [
    {"properties": {"x": INT}, "required": ["a", "b"], "maxProperties": 1},
    {"properties": {"x": INT, "y": INT}, "additionalProperties": False, "minProperties": 3},
])
def test_counts_no_object_meets_leave_other_types_valid(tokenizer, any_order, compiler, schema) -> None:  # type: ignore[no-untyped-def]
    # The min/maxProperties rewrite wrote "no object" as `false`, which refused every value.
    validator = jsonschema.validators.validator_for(schema)(schema)
    for each in (any_order, compiler):
        constraint = each.compile(JsonSchemaRequest(schema))
        for instance in (3, "s", None, [1], {"a": 1, "b": 2}, {"x": 1, "y": 2}):
            expected = validator.is_valid(instance)
            assert _accepts(constraint, tokenizer, json.dumps(instance)) == expected, instance
