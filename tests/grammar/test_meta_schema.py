"""The fast meta-schema checks (flattened 2019-09 / 2020-12, jsonschema-rs first) give the
official meta-schemas' verdicts."""

from __future__ import annotations

import json
import warnings
from typing import Any

import pytest
from jsonschema import Draft201909Validator, Draft202012Validator
from jsonschema.validators import validator_for

from afm_struct.errors import SchemaError
from afm_struct.grammar.schema.check import check_schema, validator_class
from afm_struct.grammar.schema.meta_schema import flattened_meta_schema

from .conftest import DATA, SHARED

INVALID: list[Any] = [
    {"type": 5}, {"type": "strng"}, {"properties": {"a": {"minimum": "x"}}}, {"required": "x"},
    {"$defs": {"a": {"type": "strng"}}}, {"prefixItems": 3}, {"items": {"anyOf": []}},
    {"minLength": -1}, {"enum": "x"}, {"additionalProperties": 3}, {"dependentRequired": {"a": [1]}},
    {"properties": {"a": {"items": {"not": {"maxItems": 1.5}}}}}, {"$ref": 5}, {"unevaluatedItems": 1},
]
VALID: list[Any] = [True, {}, {"type": ["string", "null"], "minLength": 0},
                    {"prefixItems": [{"type": "integer"}], "items": False, "$defs": {"x": {"$ref": "#"}}},
                    {"dependentSchemas": {"a": {"required": ["b"]}}, "unevaluatedProperties": False}]


def _corpus() -> list[Any]:
    files = sorted(DATA.glob("*.json"))
    if SHARED.is_dir():
        files += sorted(SHARED.glob("*.json"))[::60]
    return [json.loads(f.read_text())["schema"] for f in files] + INVALID + VALID


@pytest.mark.parametrize("cls", [Draft202012Validator, Draft201909Validator])
def test_flattened_meta_schema_agrees_with_the_official_one(cls: Any) -> None:
    flat = flattened_meta_schema(cls.META_SCHEMA["$id"])
    assert flat is not None
    official = validator_for(cls.META_SCHEMA)(cls.META_SCHEMA, format_checker=cls.FORMAT_CHECKER)
    fast = cls(flat, format_checker=cls.FORMAT_CHECKER)
    verdicts = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for schema in _corpus():
            verdicts.append(official.is_valid(schema))
            assert fast.is_valid(schema) == verdicts[-1], schema
    assert verdicts.count(False) >= len(INVALID) - 1  # rejections are exercised (prefixItems is 2020 only)


def test_other_drafts_are_not_flattened() -> None:
    assert flattened_meta_schema("http://json-schema.org/draft-07/schema#") is None


def _python_verdict(schema: Any) -> bool:
    cls = validator_class(schema)
    official = validator_for(cls.META_SCHEMA)(cls.META_SCHEMA, format_checker=cls.FORMAT_CHECKER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bool(official.is_valid(schema))


def _check_verdict(schema: Any) -> bool:
    try:
        check_schema(schema)
    except SchemaError as exc:
        return "unresolvable $ref" in exc.message  # the meta-schema passed; only a ref failed
    return True


DRAFTS = ["http://json-schema.org/draft-04/schema#", "http://json-schema.org/draft-07/schema#",
          "https://json-schema.org/draft/2020-12/schema"]


def test_check_schema_gives_the_python_meta_schema_verdict() -> None:
    # check_schema asks jsonschema-rs first and jsonschema only when Rust says no: the two must
    # never disagree on a verdict, whatever the draft.
    corpus = [s for s in _corpus() if isinstance(s, dict)]
    corpus += [{**s, "$schema": d} for d in DRAFTS for s in INVALID + VALID[1:] if isinstance(s, dict)]
    # A pattern Python's re accepts and Rust's regex does not: jsonschema-rs alone would reject it.
    corpus.append({"type": "string", "pattern": "^[[a-z]*[-]?[a-z]*]*$"})
    for schema in corpus:
        assert _check_verdict(schema) == _python_verdict(schema), schema


def test_an_invalid_schema_still_names_its_path() -> None:
    with pytest.raises(SchemaError) as info:
        check_schema({"properties": {"age": {"type": "intger"}}})
    assert info.value.path == "$.properties.age.type"
