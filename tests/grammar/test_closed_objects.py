"""close_objects: which objects of a schema it closes, walking schema positions only."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from afm_struct.grammar.schema.closed_objects import close_objects


def test_every_declared_object_is_closed_defs_and_combinators_included() -> None:
    schema = {"type": "object", "$defs": {"P": {"type": "object", "properties": {"c": {"type": "string"}}}},
              "properties": {"a": {"$ref": "#/$defs/P"},
                             "l": {"type": "array", "items": {"properties": {"x": {"type": "integer"}}}},
                             "u": {"anyOf": [{"properties": {"y": {}}}, {"type": "null"}]},
                             "m": {"type": "object", "additionalProperties": {"type": "integer"}},
                             "o": {"properties": {"z": {}}, "additionalProperties": True}}}
    closed = close_objects(schema)
    assert closed["additionalProperties"] is False
    assert closed["$defs"]["P"]["additionalProperties"] is False
    assert closed["properties"]["l"]["items"]["additionalProperties"] is False
    assert closed["properties"]["u"]["anyOf"][0]["additionalProperties"] is False
    assert closed["properties"]["m"] == schema["properties"]["m"]  # says what extras may be
    assert closed["properties"]["o"]["additionalProperties"] is True  # extra="allow"
    assert "additionalProperties" not in schema  # the caller's schema is untouched


@pytest.mark.parametrize("name", ["properties", "if", "allOf", "items", "additionalProperties"])
def test_property_names_are_not_read_as_keywords(name: str) -> None:
    # A field called "properties" or "if" is a name, not a keyword: the object is closed and
    # no property is added or removed.
    schema = {"type": "object", "properties": {name: {"type": "string"}}, "required": [name]}
    closed = close_objects(schema)
    assert closed == {**schema, "additionalProperties": False}
    jsonschema.validate({name: "v"}, closed)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({name: "v", "extra": 1}, closed)


@pytest.mark.parametrize("composed", [
    {"allOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]},
    {"properties": {"a": {}}, "if": {"required": ["a"]}, "then": {"properties": {"b": {}}}},
    {"properties": {"a": {"properties": {"b": {}}, "dependentSchemas": {"b": {"properties": {"c": {}}}}}}},
])
def test_schemas_that_compose_objects_are_left_open(composed: dict[str, Any]) -> None:
    assert close_objects(composed) is composed  # closing a part could empty the whole
