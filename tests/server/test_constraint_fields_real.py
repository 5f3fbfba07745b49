"""Dialect constraint fields on the real embedded model, through the openai SDK's ``extra_body``
(how vLLM's and SGLang's docs tell users to send them)."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
from openai import OpenAI

pytestmark = pytest.mark.model

PROMPT = [{"role": "user", "content": "Is the sky blue? Answer, then give a number."}]
SCHEMA = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]},
                                           "confidence": {"type": "integer", "minimum": 0, "maximum": 100}},
          "required": ["answer", "confidence"], "additionalProperties": False}


@pytest.fixture(scope="module")
def client(real_server) -> OpenAI:
    return OpenAI(base_url=f"{real_server.url}/v1", api_key="unused", max_retries=0)


def create(client: OpenAI, extra: dict) -> tuple[str, str | None]:
    raw = client.chat.completions.with_raw_response.create(
        model="SmolLM2-135M-Instruct", messages=PROMPT, max_tokens=40, temperature=0, extra_body=extra)
    return raw.parse().choices[0].message.content or "", raw.headers.get("x-afm-constraint-mode")


@pytest.mark.parametrize("extra, check", [
    ({"guided_regex": r"(yes|no), [0-9]{1,2}"}, lambda t: re.fullmatch(r"(yes|no), [0-9]{1,2}", t)),
    ({"guided_choice": ["blue", "grey", "green"]}, lambda t: t in ("blue", "grey", "green")),
    ({"grammar": 'root ::= ("yes" | "no") ", " [0-9] [0-9]?\n'},
     lambda t: re.fullmatch(r"(yes|no), [0-9][0-9]?", t)),
    ({"structured_outputs": {"json": SCHEMA}}, lambda t: jsonschema.validate(json.loads(t), SCHEMA) is None),
], ids=["guided_regex", "guided_choice", "grammar GBNF", "structured_outputs.json"])
def test_real_model_follows_the_dialect_field(client, extra, check) -> None:
    text, mode = create(client, extra)
    assert check(text), text
    assert mode == "exact"
