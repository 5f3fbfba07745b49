"""server/constraint_fields.py without a server: vLLM's disable_additional_properties rewrite."""

from __future__ import annotations

import jsonschema

from server.constraint_fields import closed_objects


def test_closed_objects_closes_every_subschema_with_properties() -> None:
    item = {"type": "object", "properties": {"x": {"type": "integer"}}}
    schema = {"type": "object", "properties": {"list": {"type": "array", "items": item},
                                               "either": {"anyOf": [item, {"$ref": "#/$defs/d"}]}},
              "$defs": {"d": item}}
    closed = closed_objects(schema)
    assert closed["additionalProperties"] is False
    assert closed["properties"]["list"]["items"]["additionalProperties"] is False
    assert closed["properties"]["either"]["anyOf"][0]["additionalProperties"] is False
    assert closed["$defs"]["d"]["additionalProperties"] is False
    assert "additionalProperties" not in item  # a copy
    jsonschema.validate({"list": [{"x": 1}]}, closed)
    try:
        jsonschema.validate({"list": [{"x": 1, "y": 2}]}, closed)
    except jsonschema.ValidationError:
        pass
    else:
        raise AssertionError("an extra property of an array item was accepted")


def test_closed_objects_leaves_data_and_declared_choices_alone() -> None:
    """``const`` / ``enum`` values are data, a property may be named "properties", and an
    object that says what other properties may be keeps its say."""
    schema = {"type": "object", "additionalProperties": {"type": "string"},
              "properties": {"properties": {"type": "object", "properties": {"a": {}}},
                             "c": {"const": {"properties": {"a": 1}}},
                             "e": {"enum": [{"properties": {}}]}}}
    closed = closed_objects(schema)
    assert closed["additionalProperties"] == {"type": "string"}
    assert set(closed["properties"]) == {"properties", "c", "e"}
    assert closed["properties"]["properties"]["additionalProperties"] is False
    assert closed["properties"]["c"] == {"const": {"properties": {"a": 1}}}
    assert closed["properties"]["e"] == {"enum": [{"properties": {}}]}
