"""extract() with a pydantic model closes the model's objects (nested ones too), so the model
cannot invent keys; a model (or nested model) with ``extra="allow"`` stays open."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

import afm_struct
from afm_struct.testing import scripted_loaded_model


class Place(BaseModel):
    city: str
    country: str


class Person(BaseModel):
    name: str
    age: int
    home: Place


class OpenPlace(BaseModel):
    model_config = ConfigDict(extra="allow")
    city: str
    country: str


class PersonWithOpenPlace(BaseModel):
    name: str
    age: int
    home: OpenPlace


class OpenPerson(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    age: int
    home: Place


NESTED_EXTRA = '{"name": "Ada", "age": 36, "home": {"city": "London", "country": "UK", "zip": "N1"}}'
# Extra keys of an open object come after the declared ones (the grammar keeps schema order).
TOP_EXTRA = '{"name": "Ada", "age": 36, "home": {"city": "London", "country": "UK"}, "nick": "A"}'


def _keys(value: Any, path: str = "$") -> set[str]:
    """Every object key of a JSON value, as paths."""
    if isinstance(value, dict):
        return {f"{path}.{k}" for k in value} | {p for k, v in value.items() for p in _keys(v, f"{path}.{k}")}
    if isinstance(value, list):
        return {p for i, v in enumerate(value) for p in _keys(v, f"{path}[{i}]")}
    return set()


DECLARED = {"$.name", "$.home", "$.home.city", "$.home.country", "$.age"}


@pytest.mark.parametrize("script", [NESTED_EXTRA, TOP_EXTRA])
def test_a_models_objects_take_no_undeclared_keys(tokenizer, script: str) -> None:
    # The scripted model wants an extra key; the closed grammar does not let it write one.
    result = afm_struct.extract("Ada, 36, London", Person, model=scripted_loaded_model(tokenizer, script),
                                max_tokens=80, check=False)
    assert _keys(json.loads(result.raw_text)) <= DECLARED, result.raw_text
    assert result.valid and isinstance(result.value, Person)


def test_a_nested_model_with_extra_allow_stays_open(tokenizer) -> None:
    lm = scripted_loaded_model(tokenizer, NESTED_EXTRA)
    result = afm_struct.extract("Ada", PersonWithOpenPlace, model=lm)
    assert result.raw_text == NESTED_EXTRA
    assert result.value.home.model_extra == {"zip": "N1"}
    # ... while the model around it is closed
    top = afm_struct.extract("Ada", PersonWithOpenPlace, model=scripted_loaded_model(tokenizer, TOP_EXTRA),
                             max_tokens=80, check=False)
    assert "$.nick" not in _keys(json.loads(top.raw_text)), top.raw_text


def test_extra_allow_on_the_model_keeps_only_it_open(tokenizer) -> None:
    result = afm_struct.extract("Ada", OpenPerson, model=scripted_loaded_model(tokenizer, TOP_EXTRA))
    assert result.raw_text == TOP_EXTRA and result.value.model_extra == {"nick": "A"}
    nested = afm_struct.extract("Ada", OpenPerson, model=scripted_loaded_model(tokenizer, NESTED_EXTRA),
                                max_tokens=80, check=False)
    assert "$.home.zip" not in _keys(json.loads(nested.raw_text)), nested.raw_text


def test_a_dict_schema_is_taken_as_written(tokenizer) -> None:
    # JSON Schema's own reading: a dict without additionalProperties stays open.
    result = afm_struct.extract("Ada", Person.model_json_schema(),
                                model=scripted_loaded_model(tokenizer, NESTED_EXTRA))
    assert result.raw_text == NESTED_EXTRA


class Adult(BaseModel):
    name: str
    age: int


@pytest.mark.model
def test_the_embedded_model_no_longer_invents_keys(embedded) -> None:
    # Open, SmolLM2 goes on with "languages": [...] until max_tokens (measured).
    result = afm_struct.extract("Extract: Ada Lovelace, 36, London.", Adult, model=embedded, max_tokens=120)
    assert result.finish_reason == "stop"
    assert set(json.loads(result.raw_text)) == {"name", "age"}
    assert result.value.name == "Ada Lovelace"
