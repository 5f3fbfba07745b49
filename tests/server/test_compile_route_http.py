"""``POST /v1/afm/compile`` and ``POST /v1/afm/validate`` (the playground's verdict and badges)
over real HTTP on one scripted server for the module; the page's files and the key rules."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from afm_struct.testing import scripted_loaded_model
from server.live import LiveServer, start_server
from server.playground_page import FILES
from server.settings import ServerSettings

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def _format(schema: Any) -> dict[str, Any]:
    return {"response_format": {"type": "json_schema",
                                "json_schema": {"name": "x", "schema": schema, "strict": True}}}


@pytest.fixture(scope="module")
def live(tokenizer: Any) -> Iterator[LiveServer]:
    server = start_server(scripted_loaded_model(tokenizer, "unused"))
    yield server
    server.stop()


def _post(live: LiveServer, path: str, body: dict[str, Any], **kw: Any) -> httpx.Response:
    return httpx.post(f"{live.url}{path}", json=body, timeout=60, **kw)


def test_compile_answers_mode_and_report(live: LiveServer) -> None:
    r = _post(live, "/v1/afm/compile", _format(SCHEMA))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "afm.compile" and body["kind"] == "json_schema"
    assert body["mode"] == "exact" and body["downgraded"] is False and body["reason"] is None
    assert body["enforcement"]["rung"] == "exact" and body["enforcement"]["counts"]["enforced"] > 0


def test_compile_reports_a_downgrade_and_its_reason(live: LiveServer) -> None:
    schema = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
    body = _post(live, "/v1/afm/compile", _format(schema)).json()
    assert body["mode"] == "relaxed" and body["downgraded"] is True
    assert "uniqueItems" in body["reason"]


def test_compile_rewrites_are_named(live: LiveServer) -> None:
    schema = {"oneOf": [{"type": "string"}, {"type": "integer"}]}
    body = _post(live, "/v1/afm/compile", _format(schema)).json()
    assert body["mode"] == "exact" and body["rewrites"], body


def test_compile_error_is_the_requests_400_as_a_verdict(live: LiveServer) -> None:
    r = _post(live, "/v1/afm/compile", _format({"type": "objekt"}))
    assert r.status_code == 200 and r.json()["ok"] is False
    chat = httpx.post(f"{live.url}/v1/chat/completions", timeout=60,
                      json={"messages": [{"role": "user", "content": "-"}], **_format({"type": "objekt"})})
    assert chat.status_code == 400 and r.json()["error"] == chat.json()["error"]
    assert r.json()["error"]["param"].startswith("response_format.json_schema.schema")
    # A body the route cannot read is still its own 400.
    assert _post(live, "/v1/afm/compile", {"messages": "nope"}).status_code == 400


@pytest.mark.parametrize("fields", [{"guided_regex": "[0-9]{3}"}, {"guided_choice": ["yes", "no"]},
                                    {"guided_grammar": 'start: "a"+'}])
def test_compile_other_kinds(live: LiveServer, fields: dict[str, Any]) -> None:
    body = _post(live, "/v1/afm/compile", fields).json()
    assert body["mode"] == "exact", body


def test_compile_tools_and_nothing(live: LiveServer) -> None:
    body = _post(live, "/v1/afm/compile", {"tools": TOOLS, "tool_choice": "required"}).json()
    assert body["kind"] == "tools" and body["mode"] == "exact" and body["tools"] == {"get_weather": "exact"}
    assert _post(live, "/v1/afm/compile", {}).json()["mode"] is None


@pytest.mark.parametrize(("output", "parsed", "valid"), [
    ('{"name": "Ada", "age": 36}', True, True),
    ('{"name": "Ada", "age": "36"}', True, False),
    ('Sure! {"name": "Ada", "age": 36}', False, False),
])
def test_validate_json(live: LiveServer, output: str, parsed: bool, valid: bool) -> None:
    body = _post(live, "/v1/afm/validate", {**_format(SCHEMA), "output": output}).json()
    assert (body["parsed"], body["valid"]) == (parsed, valid), body
    assert bool(body["errors"]) is not valid


def test_validate_choice_and_regex(live: LiveServer) -> None:
    def verdict(fields: dict[str, Any], output: str) -> bool:
        return bool(_post(live, "/v1/afm/validate", {**fields, "output": output}).json()["valid"])

    assert verdict({"guided_choice": ["positive", "negative"]}, "positive")
    assert not verdict({"guided_choice": ["positive", "negative"]}, "I think positive")
    assert verdict({"guided_regex": "[0-9]{3}"}, "123") and not verdict({"guided_regex": "[0-9]{3}"}, "12a")


def test_validate_tool_calls(live: LiveServer) -> None:
    tools = {"tools": TOOLS, "tool_choice": "required"}
    ok = _post(live, "/v1/afm/validate", {**tools, "tool_calls": [
        {"name": "get_weather", "arguments": '{"city": "Paris"}'}]}).json()
    assert ok["valid"] and ok["kind"] == "tools"
    bad = _post(live, "/v1/afm/validate", {**tools, "tool_calls": [
        {"name": "get_weather", "arguments": '{"town": "Paris"}'}]}).json()
    assert not bad["valid"] and bad["parsed"]
    # Free decoding writes the call as text: read from the output.
    text = 'Here: {"name": "get_weather", "arguments": {"city": "Paris"}}'
    assert _post(live, "/v1/afm/validate", {**tools, "output": text}).json()["valid"]
    assert not _post(live, "/v1/afm/validate", {**tools, "output": "It is sunny."}).json()["valid"]


def test_page_files(live: LiveServer) -> None:
    r = httpx.get(f"{live.url}/playground", timeout=10, follow_redirects=True)
    assert r.status_code == 200 and "<title>afm-struct playground</title>" in r.text
    for name, kind in FILES.items():
        got = httpx.get(f"{live.url}/playground/{name}", timeout=10)
        assert got.status_code == 200 and got.headers["content-type"] == kind
    assert httpx.get(f"{live.url}/playground/../server/app.py", timeout=10).status_code == 404
    assert httpx.get(f"{live.url}/playground/secret.js", timeout=10).status_code == 404


def test_keys_guard_the_api_not_the_page(tokenizer: Any) -> None:
    server = start_server(scripted_loaded_model(tokenizer, "x"), ServerSettings(api_keys=("sekret",)))
    try:
        assert httpx.get(f"{server.url}/playground/", timeout=10).status_code == 200
        assert httpx.get(f"{server.url}/playground/app.js", timeout=10).status_code == 200
        body = json.dumps(_format(SCHEMA))
        headers = {"Content-Type": "application/json"}
        assert httpx.post(f"{server.url}/v1/afm/compile", content=body, headers=headers).status_code == 401
        authed = {**headers, "Authorization": "Bearer sekret"}
        assert httpx.post(f"{server.url}/v1/afm/compile", content=body, headers=authed).status_code == 200
    finally:
        server.stop()
