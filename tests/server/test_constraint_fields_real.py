"""Every enforced dialect constraint field on the real embedded model, over HTTP through the
openai SDK's ``extra_body`` (how vLLM's, SGLang's and llama.cpp's docs tell users to send them):
the output matches the constraint and ``X-AFM-Constraint-Mode`` says it was enforced exactly.
The scripted-model twin (tests/server/test_constraint_fields.py) covers the refusals."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest
from openai import OpenAI

pytestmark = pytest.mark.model

MODEL = "SmolLM2-135M-Instruct"
PROMPT = [{"role": "user", "content": "Is the sky blue? Answer, then give a number."}]
SCHEMA = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]},
                                           "confidence": {"type": "integer", "minimum": 0, "maximum": 100}},
          "required": ["answer", "confidence"], "additionalProperties": False}
# No additionalProperties: structured_outputs.disable_additional_properties closes it.
OPEN = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}}, "required": ["answer"]}
CLOSED_OPEN = {**OPEN, "additionalProperties": False}
YES_NO = re.compile(r"(yes|no), [0-9][0-9]?")
YES_NO_GBNF = 'root ::= ("yes" | "no") ", " [0-9] [0-9]?\n'
YES_NO_LARK = 'start: ("yes" | "no") ", " /[0-9]{1,2}/'
CHOICES = ["blue", "grey", "green"]
MAX_TOKENS = 24


@pytest.fixture(scope="module")
def client(real_server) -> OpenAI:
    return OpenAI(base_url=f"{real_server.url}/v1", api_key="unused", max_retries=0)


def create(client: OpenAI, extra: dict[str, Any]) -> tuple[str, str | None]:
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=PROMPT, max_tokens=MAX_TOKENS, temperature=0, extra_body=extra)
    return raw.parse().choices[0].message.content or "", raw.headers.get("x-afm-constraint-mode")


def yes_no(text: str) -> bool:
    return YES_NO.fullmatch(text) is not None


def one_of_the_choices(text: str) -> bool:
    return text in CHOICES


def follows(schema: dict[str, Any]) -> Any:
    def check(text: str) -> bool:
        jsonschema.validate(json.loads(text), schema)
        return True
    return check


def is_an_object(text: str) -> bool:
    return isinstance(json.loads(text), dict)


FIELDS: list[tuple[str, dict[str, Any], Any]] = [
    # vLLM, legacy fields
    ("guided_regex", {"guided_regex": YES_NO.pattern}, yes_no),
    ("guided_choice", {"guided_choice": CHOICES}, one_of_the_choices),
    ("guided_json object", {"guided_json": SCHEMA}, follows(SCHEMA)),
    ("guided_json text + guided_decoding_backend",
     {"guided_json": json.dumps(SCHEMA), "guided_decoding_backend": "xgrammar"}, follows(SCHEMA)),
    ("guided_grammar Lark", {"guided_grammar": YES_NO_LARK}, yes_no),
    ("guided_grammar GBNF", {"guided_grammar": YES_NO_GBNF}, yes_no),
    # vLLM, structured_outputs
    ("structured_outputs.json", {"structured_outputs": {"json": SCHEMA}}, follows(SCHEMA)),
    ("structured_outputs.json + disable_additional_properties + disable_fallback",
     {"structured_outputs": {"json": OPEN, "disable_additional_properties": True, "disable_fallback": True,
                             "backend": "guidance"}}, follows(CLOSED_OPEN)),
    ("structured_outputs.regex", {"structured_outputs": {"regex": YES_NO.pattern}}, yes_no),
    ("structured_outputs.choice", {"structured_outputs": {"choice": CHOICES}}, one_of_the_choices),
    ("structured_outputs.grammar", {"structured_outputs": {"grammar": YES_NO_LARK}}, yes_no),
    ("structured_outputs.json_object", {"structured_outputs": {"json_object": True}}, is_an_object),
    # SGLang
    ("SGLang regex", {"regex": YES_NO.pattern}, yes_no),
    ("SGLang ebnf", {"ebnf": 'root ::= answer ", " digit digit?\nanswer ::= "yes" | "no"\ndigit ::= [0-9]\n'},
     yes_no),
    ("SGLang json_schema text", {"json_schema": json.dumps(SCHEMA)}, follows(SCHEMA)),
    # llama.cpp
    ("llama.cpp grammar", {"grammar": YES_NO_GBNF}, yes_no),
    ("llama.cpp json_schema", {"json_schema": SCHEMA}, follows(SCHEMA)),
    ("llama.cpp response_format json_object + schema",
     {"response_format": {"type": "json_object", "schema": SCHEMA}}, follows(SCHEMA)),
    # TGI and Ollama's fields, sent to /v1/chat/completions
    ("TGI grammar json", {"grammar": {"type": "json", "value": SCHEMA}}, follows(SCHEMA)),
    ("TGI grammar regex", {"grammar": {"type": "regex", "value": YES_NO.pattern}}, yes_no),
    ("Ollama format schema", {"format": SCHEMA}, follows(SCHEMA)),
    ("Ollama format json", {"format": "json"}, is_an_object),
]


@pytest.mark.parametrize("extra, check", [f[1:] for f in FIELDS], ids=[f[0] for f in FIELDS])
def test_real_model_follows_the_dialect_field(client, extra, check) -> None:
    text, mode = create(client, extra)
    assert check(text), text
    assert mode == "exact"


def test_completions_create_follows_a_dialect_field(client) -> None:
    raw = client.completions.with_raw_response.create(
        model=MODEL, prompt="Q: Is the sky blue? Answer, then give a number.\nA: ", max_tokens=MAX_TOKENS,
        temperature=0, extra_body={"structured_outputs": {"grammar": YES_NO_GBNF}})
    text = raw.parse().choices[0].text
    assert yes_no(text), text
    assert raw.headers.get("x-afm-constraint-mode") == "exact"
