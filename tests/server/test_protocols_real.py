"""``/v1/completions`` and Ollama's API on the real embedded model: constrained outputs valid
(the openai SDK's ``completions.create`` with ``extra_body`` constraints; the ``ollama`` client
with a pydantic ``format``), and a free raw prompt continued as text."""

from __future__ import annotations

import json
import re

import jsonschema
import ollama
import pytest
from openai import OpenAI
from pydantic import BaseModel

pytestmark = pytest.mark.model

MODEL = "SmolLM2-135M-Instruct"
PROMPT = "Q: Is the sky blue? Answer yes or no, then a confidence from 0 to 100.\nA:"
SCHEMA = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]},
                                           "confidence": {"type": "integer", "minimum": 0, "maximum": 100}},
          "required": ["answer", "confidence"], "additionalProperties": False}


class City(BaseModel):
    name: str
    country: str


@pytest.fixture(scope="module")
def client(real_server) -> OpenAI:
    return OpenAI(base_url=f"{real_server.url}/v1", api_key="unused", max_retries=0)


@pytest.mark.parametrize("extra, check", [
    ({"guided_regex": r" (yes|no), [0-9]{1,2}"}, lambda t: re.fullmatch(r" (yes|no), [0-9]{1,2}", t)),
    ({"response_format": {"type": "json_schema",
                          "json_schema": {"name": "a", "strict": True, "schema": SCHEMA}}},
     lambda t: jsonschema.validate(json.loads(t), SCHEMA) is None),
], ids=["guided_regex", "response_format json_schema"])
def test_completions_create_with_constraints(client, extra, check) -> None:
    raw = client.completions.with_raw_response.create(model=MODEL, prompt=PROMPT, max_tokens=40,
                                                      temperature=0, extra_body=extra)
    text = raw.parse().choices[0].text
    assert check(text), text
    assert raw.headers.get("x-afm-constraint-mode") == "exact"


def test_ollama_format_with_a_pydantic_schema(real_server) -> None:
    client = ollama.Client(host=real_server.url, timeout=300)
    question = [{"role": "user", "content": "Paris is in France. Give city and country."}]
    out = client.chat(model=MODEL, messages=question,
                      format=City.model_json_schema(), options={"temperature": 0, "num_predict": 48})
    City.model_validate_json(out.message.content)
    parts = list(client.generate(model=MODEL, prompt="Name a city in France.", format="json", stream=True,
                                 options={"temperature": 0, "num_predict": 48}))
    assert parts[-1].done and isinstance(json.loads("".join(p.response for p in parts)), dict)
