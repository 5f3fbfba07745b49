"""``structural_tag`` over real HTTP on every door that takes a response format (scripted model).

The scripted model writes a known text.  Where that text's tagged body breaks the body's schema
(``"days": "three"``), the body that comes out must validate anyway: only the mask can have
made it so.  Text outside the tags is free: the model's own words come out unchanged.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from .conftest import USER, decode, stream_raw

WEATHER = {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]},
                                             "days": {"type": "integer", "minimum": 1, "maximum": 9}},
           "required": ["city", "days"], "additionalProperties": False}
# The model's text: free text, one call whose body breaks the schema, free text.
SCRIPT = 'Let me look. <fn=weather>{"city": "Oslo", "days": "three"}</fn> Done.'
VLLM_FORM = {"type": "structural_tag", "triggers": ["<fn="],
             "structures": [{"begin": "<fn=weather>", "schema": WEATHER, "end": "</fn>"},
                            {"begin": "<fn=time>", "schema": {"type": "string"}, "end": "</fn>"}]}
XGRAMMAR_FORM = {"type": "structural_tag", "format": {
    "type": "triggered_tags", "triggers": ["<fn="],
    "tags": [{"type": "tag", "begin": "<fn=weather>", "end": "</fn>",
              "content": {"type": "json_schema", "json_schema": WEATHER}},
             {"type": "tag", "begin": "<fn=time>", "content": {"type": "any_text"}, "end": "</fn>"}]}}
TAGGED = re.compile(r"<fn=weather>(.*?)</fn>", re.DOTALL)


@pytest.fixture(scope="module")
def live(tokenizer):
    from afm_struct.testing import scripted_loaded_model
    from server.live import start_server

    server = start_server(scripted_loaded_model(tokenizer, SCRIPT))
    yield server
    server.stop()


def chat(url: str, **fields: Any) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", timeout=60,
                      json={"messages": USER, "max_tokens": 60, "temperature": 0, **fields})


def steered(text: str) -> None:
    """The model's free text kept, its broken body steered into a valid one."""
    assert text.startswith("Let me look. <fn=weather>"), text
    bodies = TAGGED.findall(text)
    assert bodies, text
    for body in bodies:
        jsonschema.validate(json.loads(body), WEATHER)
    after = text.split("</fn>", 1)[1]
    assert "<fn=" not in after or TAGGED.search(after), text  # any later trigger opened a tag


def error(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 400, response.text
    return response.json()["error"]


@pytest.mark.parametrize("form", [VLLM_FORM, XGRAMMAR_FORM], ids=["vllm", "xgrammar"])
def test_chat_steers_a_tagged_body_and_keeps_free_text(live, form) -> None:
    response = chat(live.url, response_format=form)
    assert response.status_code == 200, response.text
    steered(response.json()["choices"][0]["message"]["content"])
    assert response.headers["x-afm-constraint-mode"] == "exact"
    assert "x-grammar-constraints" not in response.headers


@pytest.mark.parametrize("form", [VLLM_FORM, XGRAMMAR_FORM], ids=["vllm", "xgrammar"])
def test_chat_stream_steers_the_body(live, form) -> None:
    response, payloads = stream_raw(live.url, {"messages": USER, "max_tokens": 60, "temperature": 0,
                                               "response_format": form})
    assert response.status_code == 200
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in decode(payloads) if c["choices"])
    steered(text)


def test_openai_sdk_and_the_vllm_fields(live) -> None:
    client = openai.OpenAI(base_url=f"{live.url}/v1", api_key="x")
    done = client.chat.completions.create(model="scripted", messages=USER, max_tokens=60, temperature=0,
                                          response_format=VLLM_FORM)  # type: ignore[arg-type]
    steered(done.choices[0].message.content or "")
    # vLLM's structured_outputs.structural_tag takes JSON text; the top-level field an object
    for extra in ({"structured_outputs": {"structural_tag": json.dumps(VLLM_FORM)}},
                  {"structural_tag": {k: v for k, v in XGRAMMAR_FORM.items() if k != "type"}}):
        steered(chat(live.url, **extra).json()["choices"][0]["message"]["content"])
    # counted under its own constraint mode (server/observe.py), not as free text
    metrics = httpx.get(f"{live.url}/metrics", timeout=30).text
    assert re.search(r'afm_requests_total\{[^}]*mode="structural_tag"[^}]*\} [1-9]', metrics), metrics[-2000:]


def test_completions_and_responses(live) -> None:
    response = httpx.post(f"{live.url}/v1/completions", timeout=60, json={
        "prompt": "hi", "max_tokens": 60, "temperature": 0, "response_format": XGRAMMAR_FORM})
    assert response.status_code == 200, response.text
    steered(response.json()["choices"][0]["text"])
    client = openai.OpenAI(base_url=f"{live.url}/v1", api_key="x")
    answer = client.responses.create(model="scripted", input="hi", max_output_tokens=60, temperature=0,
                                     text={"format": VLLM_FORM})  # type: ignore[typeddict-item]
    steered(answer.output_text)


def test_free_text_without_a_trigger_is_the_models_own(tokenizer) -> None:
    from afm_struct.testing import scripted_loaded_model
    from server.live import start_server

    plain = "No tools needed: it is sunny <fn in a sense."
    server = start_server(scripted_loaded_model(tokenizer, plain))
    try:
        response = chat(server.url, response_format=VLLM_FORM)
        assert response.json()["choices"][0]["message"]["content"] == plain
    finally:
        server.stop()


def test_a_body_the_engine_cannot_enforce_exactly_is_reported(live) -> None:
    unique = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
    form = {"type": "structural_tag", "triggers": ["<fn="],
            "structures": [{"begin": "<fn=weather>", "schema": unique, "end": "</fn>"}]}
    response = httpx.post(f"{live.url}/v1/chat/completions", timeout=60,
                          headers={"X-AFM-Enforcement": "true"},
                          json={"messages": USER, "max_tokens": 60, "response_format": form})
    assert response.status_code == 200, response.text
    assert response.headers["x-grammar-constraints"] == "downgraded"
    assert response.headers["x-afm-constraint-mode"] == "relaxed"
    report = response.json()["afm_enforcement"]
    assert report["reason"] == "response_format.structures.0.schema:unsupported_keyword:uniqueItems"
    assert {(e["body"], e["keyword"], e["status"]) for e in report["keywords"] if e["status"] != "enforced"} \
        == {("response_format.structures.0.schema", "uniqueItems", "validated")}


def _format(*elements: Any) -> dict[str, Any]:
    return {"type": "structural_tag", "format": {"type": "sequence", "elements": list(elements)}}


CONST = {"type": "const_string", "value": "a"}
REFUSED: list[tuple[dict[str, Any], str, str]] = [
    ({"response_format": _format(CONST, CONST, {"type": "grammar", "grammar": "start: x"})},
     "response_format.format.elements.2.type", "unsupported_parameter"),
    ({"response_format": _format(CONST, {"type": "any_text", "excludes": ["<"]})},
     "response_format.format.elements.1.excludes", "unsupported_parameter"),
    ({"response_format": _format({"type": "any_text"}, {"type": "json_schema", "json_schema": {}})},
     "response_format.format.elements.0", "invalid_value"),
    ({"response_format": {**VLLM_FORM, "triggers": ["<tool="]}}, "response_format.structures.0.begin",
     "invalid_value"),
    ({"response_format": {**VLLM_FORM, "triggers": ["<fn", "<fn="]}}, "response_format.triggers.1",
     "invalid_value"),
    ({"response_format": {"type": "structural_tag", "triggers": ["<f"], "structures": [
        {"begin": "<f>", "schema": {"type": "integer", "minimum": "x"}, "end": "</f>"}]}},
     "response_format.structures.0.schema", "invalid_schema"),
    ({"text": {"format": {"type": "structural_tag", "format": {"type": "tag", "begin": "<a>",
                                                                  "content": {"type": "nope"}, "end": ""}}}},
     "text.format.format.content.type", "unsupported_parameter"),
    ({"structured_outputs": {"structural_tag": '{"format": {"type": "or", "elements": []}}'}},
     "structured_outputs.structural_tag", "invalid_value"),
    ({"response_format": VLLM_FORM, "tools": [{"type": "function", "function": {"name": "f"}}]},
     "response_format", "conflicting_constraints"),
    # a body below exact where exact was required (vLLM's disable_fallback)
    ({"structured_outputs": {"disable_fallback": True, "structural_tag": {"triggers": ["<f"], "structures": [
        {"begin": "<f>", "schema": {"type": "array", "uniqueItems": True}, "end": "</f>"}]}}},
     "structured_outputs.structural_tag", "constraint_not_exact"),
]


@pytest.mark.parametrize("fields, param, code", REFUSED, ids=[p for _, p, _ in REFUSED])
def test_an_unsupported_part_is_a_400_naming_it(live, fields, param, code) -> None:
    if "text" in fields:
        response = httpx.post(f"{live.url}/v1/responses", timeout=60, json={"input": "hi", **fields})
    else:
        response = chat(live.url, **fields)
    err = error(response)
    assert (err["param"], err["code"]) == (param, code), err


@pytest.mark.model
def test_the_embedded_model_writes_a_tag_whose_body_validates(real_server) -> None:
    """The real model under a forced tag: the output is exactly begin, a valid body, end."""
    form = {"type": "structural_tag", "format": {"type": "tag", "begin": "<call>", "end": "</call>",
                                                 "content": {"type": "json_schema", "json_schema": WEATHER}}}
    client = openai.OpenAI(base_url=f"{real_server.url}/v1", api_key="x", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="SmolLM2-135M-Instruct", messages=[{"role": "user", "content": "Weather in Rome for 3 days?"}],
        max_tokens=40, temperature=0, response_format=form)  # type: ignore[arg-type]
    text = raw.parse().choices[0].message.content or ""
    assert text.startswith("<call>") and text.endswith("</call>"), text
    jsonschema.validate(json.loads(text[len("<call>"):-len("</call>")]), WEATHER)
    assert raw.headers["x-afm-constraint-mode"] == "exact"


@pytest.mark.model
def test_the_embedded_model_writes_free_text_and_valid_calls(real_server) -> None:
    """A raw prompt that shows the call syntax: whatever the model writes, each call it opens
    (through structured_outputs.structural_tag) carries a valid body and is closed."""
    prompt = ('Tool: <fn=weather>{"city": "Paris", "days": 2}</fn> gives the weather.\n'
              "User: weather in Rome?\nAssistant: Sure, calling it now:")
    response = httpx.post(f"{real_server.url}/v1/completions", timeout=120, json={
        "prompt": prompt, "max_tokens": 30, "temperature": 0,
        "structured_outputs": {"structural_tag": json.dumps(VLLM_FORM)}})
    assert response.status_code == 200, response.text
    text = response.json()["choices"][0]["text"]
    for begin, body in re.findall(r"<fn=(weather|time)>(.*?)</fn>", text, re.DOTALL):
        jsonschema.validate(json.loads(body), WEATHER if begin == "weather" else {"type": "string"})
    opened = text.count("<fn=")
    assert opened >= 1 and opened == len(re.findall(r"<fn=(?:weather|time)>", text)), text
