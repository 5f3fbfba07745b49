"""The library API: extract() and the processor for unmodified mlx_lm.generate."""

from __future__ import annotations

import json

import jsonschema
import pytest
from pydantic import BaseModel

import afm_struct
from afm_struct.errors import InvalidRequestError
from afm_struct.testing import scripted_loaded_model


class Person(BaseModel):
    name: str
    age: int


def test_facade_exports_are_sorted_and_resolve():
    assert afm_struct.__all__ == sorted(afm_struct.__all__)
    for name in afm_struct.__all__:
        assert getattr(afm_struct, name) is not None
    with pytest.raises(AttributeError):
        afm_struct.nope  # noqa: B018


def test_extract_returns_a_pydantic_instance(tokenizer):
    lm = scripted_loaded_model(tokenizer, '{"name": "Ada", "age": 36}')
    result = afm_struct.extract("Ada is 36.", Person, model=lm)
    assert result.value == Person(name="Ada", age=36)
    assert result.valid and result.mode == "enforced" and result.finish_reason == "stop"
    assert result.raw_text == '{"name": "Ada", "age": 36}'


def test_extract_is_steered_by_the_schema_not_the_script(tokenizer):
    # The scripted model wants prose; the mask forces an instance of the schema anyway.
    lm = scripted_loaded_model(tokenizer, "Sure! Here is the answer: Ada, 36 years old.")
    result = afm_struct.extract("Ada is 36.", Person, model=lm, max_tokens=40, check=False)
    assert result.raw_text.startswith("{")
    if result.finish_reason == "stop":
        assert result.valid
        jsonschema.validate(json.loads(result.raw_text), Person.model_json_schema())


def test_extract_cut_short_raises_with_the_result(tokenizer):
    lm = scripted_loaded_model(tokenizer, '{"name": "Ada", "age": 36}')
    with pytest.raises(afm_struct.ExtractionError) as err:
        afm_struct.extract("Ada is 36.", Person, model=lm, max_tokens=3)
    assert err.value.result.finish_reason == "length"
    assert "max_tokens (3)" in err.value.message
    assert err.value.result.value is None


@pytest.mark.parametrize(("messages", "param"), [
    ("Ada is 36.\ud800", "messages.0.content"),
    ([{"role": "system", "content": "x"}, {"role": "user", "content": "\udfffAda"}], "messages.1.content"),
])
def test_extract_refuses_a_lone_surrogate_with_a_clear_error(tokenizer, messages, param):
    """Before: the tokenizer's TypeError ("TextEncodeInput must be Union[...]")."""
    lm = scripted_loaded_model(tokenizer, '{"name": "Ada", "age": 36}')
    with pytest.raises(InvalidRequestError) as err:
        afm_struct.extract(messages, Person, model=lm)
    assert err.value.param == param and "surrogate" in err.value.message


@pytest.mark.parametrize("seed", [-1, 2 ** 64])
def test_extract_refuses_a_seed_outside_64_bits_with_a_clear_error(tokenizer, seed):
    """Before: mlx's raw TypeError ("key(): incompatible function arguments")."""
    lm = scripted_loaded_model(tokenizer, '{"name": "Ada", "age": 36}')
    with pytest.raises(InvalidRequestError) as err:
        afm_struct.extract("Ada is 36.", Person, model=lm, temperature=0.7, seed=seed)
    assert err.value.param == "seed" and "2**64" in err.value.message


def test_extract_rejects_a_non_schema():
    with pytest.raises(TypeError):
        afm_struct.extract("x", 42, model=object())


@pytest.mark.model
def test_processor_works_with_unmodified_mlx_lm_generate(embedded):
    from mlx_lm import generate
    from mlx_lm.tokenizer_utils import TokenizerWrapper

    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                               "country": {"type": "string", "maxLength": 30}},
              "required": ["city", "country"], "additionalProperties": False}
    constraint = afm_struct.compile_constraint(embedded.tokenizer, afm_struct.JsonSchemaRequest(schema))
    processor = afm_struct.make_mlx_lm_processor(constraint, embedded.tokenizer)
    wrapper = TokenizerWrapper(embedded.tokenizer.hf, eos_token_ids=set(embedded.tokenizer.eos_token_ids))
    prompt = embedded.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Where is the Eiffel Tower? Answer in JSON."}])
    text = generate(embedded.model, wrapper, prompt, max_tokens=80, logits_processors=[processor])
    value = json.loads(text)
    jsonschema.validate(value, schema)
    assert value["city"] == "Paris"


@pytest.mark.model
def test_extract_with_the_embedded_model(embedded):
    result = afm_struct.extract("Extract the person as JSON: Ada Lovelace was 36 years old.", Person,
                                model=embedded, max_tokens=60)
    assert result.valid
    assert isinstance(result.value, Person)
    assert "Ada" in result.value.name
