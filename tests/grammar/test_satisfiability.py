"""Schemas with no valid instance are refused (400 with a path); schemas with one still compile."""

from __future__ import annotations

import json
import warnings

import jsonschema
import pytest

from afm_struct.errors import SchemaError
from afm_struct.grammar.compiler import compile_constraint
from afm_struct.grammar.schema.check import json_path, validator_class
from afm_struct.grammar.schema.satisfiability import find_empty
from afm_struct.grammar.spec import JsonSchemaRequest

from .conftest import SHARED

CYCLE = {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}}
DISJOINT = {"allOf": [{"type": "string"}, {"type": "integer"}]}

EMPTY = [  # (schema, JSON path of the reason, words the reason must contain)
    (CYCLE, '$["$ref"]', "cycle with no base case"),
    (DISJOINT, "$.allOf", "every required type"),
    ({"type": "object", "properties": {"child": {"$ref": "#"}}, "required": ["child"]},
     '$.properties.child["$ref"]', "cycle"),
    ({"type": "object", "required": ["kids"], "properties": {
        "kids": {"type": "array", "minItems": 1, "items": {"$ref": "#"}}}},
     '$.properties.kids.items["$ref"]', "minItems 1"),
    ({"$defs": {"n": {"allOf": [{"$ref": "#/$defs/n"}]}}, "type": "object",
      "properties": {"x": {"$ref": "#/$defs/n"}}, "required": ["x"]}, '$.properties.x["$ref"]', "cycle"),
    ({"type": "string", "enum": [1, 2]}, "$.enum", "allowed type"),
    ({"const": "a", "type": "integer"}, "$.const", "allowed type"),
    ({"enum": []}, "$.enum", "empty"),
    ({"type": "object", "properties": {"a": False}, "required": ["a"]}, "$.properties.a", "false"),
    ({"type": "object", "properties": {}, "required": ["a"], "additionalProperties": False},
     "$.required", "additionalProperties"),
    ({"type": "integer", "minimum": 3, "maximum": 2}, "$.minimum", "no integer"),
    ({"type": "integer", "exclusiveMinimum": 2, "exclusiveMaximum": 3}, "$.minimum", "no integer"),
    ({"type": "number", "minimum": 2, "exclusiveMaximum": 2}, "$.minimum", "no number"),
    ({"type": "string", "minLength": 5, "maxLength": 2}, "$.minLength", "minLength 5"),
    ({"type": "array", "minItems": 3, "maxItems": 1}, "$.minItems", "minItems 3"),
    ({"type": "array", "minItems": 1, "items": False}, "$.items", "minItems 1"),
    ({"anyOf": [{"type": "string", "maxLength": -0, "minLength": 1}, False]}, "$.anyOf", "no branch"),
    ({"properties": {"a": {"not": {}}}, "required": ["a"], "type": "object"}, "$.properties.a.not", "not"),
    (False, "$", "false"),
    # enum / const values that no sibling keyword lets through (jsonschema decides, refs included)
    ({"type": "integer", "enum": [1, 2], "minimum": 5}, "$.enum", "fails `minimum`"),
    ({"$defs": {"big": {"minimum": 10}}, "enum": [1, 2, "x"], "allOf": [{"$ref": "#/$defs/big"}],
      "type": "integer"}, "$.enum", "fails `minimum`"),
    ({"type": "object", "required": ["c"], "properties": {
        "c": {"const": "red", "pattern": "^b"}}}, "$.properties.c.const", "fails `pattern`"),
    # oneOf whose branches are already implied: every instance matches two, so none matches one
    ({"type": "object", "required": ["radius", "length", "width"],
      "oneOf": [{"required": ["radius"]}, {"required": ["length", "width"]}]}, "$.oneOf",
     "oneOf[0] and oneOf[1]"),
    ({"type": "integer", "oneOf": [{"type": "number"}, {"description": "anything"}]}, "$.oneOf",
     "exactly one"),
]

HAS_INSTANCE = [  # (schema, one instance)
    ({"type": "object", "properties": {"next": {"$ref": "#"}, "v": {"type": "integer"}}}, {"v": 1}),
    ({"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}},
      "required": ["kids"]}, {"kids": []}),
    ({"$defs": {"e": {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"$ref": "#/$defs/e"},
                                                       "minItems": 1}]}}, "$ref": "#/$defs/e"}, [[1]]),
    ({"allOf": [{"type": ["string", "integer"]}, {"type": "integer"}]}, 3),
    ({"allOf": [{"type": "number"}, {"type": "integer"}]}, 3),
    ({"type": "integer", "minimum": 2.5, "maximum": 3}, 3),
    ({"type": "number", "exclusiveMinimum": 2, "maximum": 2.5}, 2.25),
    ({"type": ["string", "null"], "minLength": 5, "maxLength": 2}, None),
    ({"type": "object", "required": ["a"], "additionalProperties": False,
      "patternProperties": {"^a$": {"type": "integer"}}}, {"a": 1}),
    ({"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer", "minimum": 2,
      "maximum": 2, "exclusiveMinimum": False}, 2),
    ({"enum": [1, "a"], "type": "string"}, "a"),
    ({"type": "array", "minItems": 1, "prefixItems": [{"const": 1}], "items": False}, [1]),
    ({"not": {"type": "string"}}, 1),
    # draft 7 ignores a $ref's siblings: the "type" beside it does not clash with the target
    ({"$schema": "http://json-schema.org/draft-07/schema#", "definitions": {"s": {"type": "string"}},
      "$ref": "#/definitions/s", "type": "integer", "enum": [1]}, "a"),
    ({"type": "integer", "enum": [1, 7], "minimum": 5}, 7),
    ({"type": "object", "required": ["radius"],
      "oneOf": [{"required": ["radius"]}, {"required": ["length", "width"]}]}, {"radius": 1}),
    ({"type": "integer", "oneOf": [{"type": "integer"}, {"type": "string"}]}, 1),
    ({"oneOf": [{"required": ["a"]}, {"required": ["b"]}], "type": "object", "required": ["a"]}, {"a": 1}),
]


@pytest.mark.parametrize(("schema", "path", "words"), EMPTY, ids=[str(i) for i in range(len(EMPTY))])
def test_schemas_without_instances_are_refused_with_a_path(tokenizer, schema, path, words) -> None:
    empty = find_empty(schema)
    assert empty is not None and words in empty.reason
    assert json_path(empty.path) == path
    with pytest.raises(SchemaError) as err:
        compile_constraint(tokenizer, JsonSchemaRequest(schema, strict=True))
    assert err.value.status == 400 and err.value.path == path
    assert "no valid instance" in err.value.message


@pytest.mark.parametrize(("schema", "instance"), HAS_INSTANCE, ids=[str(i) for i in range(len(HAS_INSTANCE))])
def test_schemas_with_an_instance_still_compile(tokenizer, schema, instance) -> None:
    jsonschema.validate(instance, schema, cls=validator_class(schema))  # the premise
    assert find_empty(schema) is None
    assert compile_constraint(tokenizer, JsonSchemaRequest(schema, strict=True)).mode in (
        "enforced", "downgraded")


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"JSONSchemaBench dev set not present at {SHARED}")
def test_no_dev_schema_with_a_valid_instance_is_called_empty() -> None:
    """All 3,320 dev schemas (~1.5 s): none whose listed valid instances validate is refused."""
    wrong = []
    for f in sorted(SHARED.glob("*.json")):
        entry = json.loads(f.read_text())
        schema = entry["schema"]
        if find_empty(schema) is None:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cls = validator_class(schema)
            if any(t.get("valid") and cls(schema).is_valid(t["data"]) for t in entry.get("tests", [])):
                wrong.append(f.name)
    assert wrong == []


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"JSONSchemaBench dev set not present at {SHARED}")
@pytest.mark.parametrize(("name", "empty"), [
    ("Glaiveai2K---calculate_area_2f92f3ea.json", True),  # oneOf of required sets all implied
    ("Github_hard---o10346.json", False),  # no root type: any non-object is an instance
    ("Github_hard---o4197.json", False),  # the unsatisfiable definition is one anyOf branch
])
def test_llguidance_unsatisfiable_is_a_400_only_when_proved(tokenizer, name, empty) -> None:
    """llguidance's JSON compiler says "Unsatisfiable schema" on these 3 dev schemas; only the
    first has no instance.

    Its message is not a proof (it judges some branches eagerly and reads properties as implying
    an object), so the 400 comes from our proof and the others stay on the ladder, where the
    any-order grammar (which has its own translation) serves them exactly.
    """
    schema = json.loads((SHARED / name).read_text())["schema"]
    if empty:
        with pytest.raises(SchemaError) as err:
            compile_constraint(tokenizer, JsonSchemaRequest(schema, strict=True))
        assert err.value.path == "$.properties.dimensions.oneOf"
    else:
        compiled = compile_constraint(tokenizer, JsonSchemaRequest(schema, strict=True))
        assert compiled.mode == "enforced" and compiled.rung == "exact", (compiled.rung, compiled.reason)
    if name == "Github_hard---o10346.json":
        assert validator_class(schema)(schema).is_valid(1)  # the witness
        assert compiled.validate("1").ok  # and the grammar takes it


def test_one_subschema_object_in_two_places_is_judged_in_both() -> None:
    """A Python caller may put one dict in two places; the analysis's set of nodes being
    explained (shared down the recursion) must not carry one place's visit into the other."""
    empty = {"type": "string", "minLength": 5, "maxLength": 2}
    found = find_empty({"anyOf": [empty, empty]})
    assert found is not None and "no branch of `anyOf`" in found.reason
    has_one = {"type": "integer"}
    assert find_empty({"type": "object", "required": ["a", "b"],
                       "properties": {"a": has_one, "b": {"anyOf": [has_one, empty]}}}) is None


def test_nested_allof_depth_reached_is_kept() -> None:
    """The analysis recurses one frame per ``allOf`` level (a helper frame per level halved the
    depth it reaches before Python's recursion limit: 600 levels failed with it)."""
    schema: dict = {"type": "string"}
    for _ in range(600):
        schema = {"allOf": [schema]}
    assert find_empty(schema) is None
