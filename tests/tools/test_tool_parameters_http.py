"""A tool's ``parameters`` over HTTP: the arguments are a JSON object, and errors name the tool.

Before: ``{"type": "string"}`` parameters made ``"arguments": "Hello, World!"`` (not JSON); an
invalid tool schema was reported at ``response_format.json_schema.schema``; a duplicate name at
``tools``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from afm_struct.testing import scripted_loaded_model
from server.live import LiveServer, start_server

USER = [{"role": "user", "content": "Say hello."}]
# The scripted model wants to pass a bare string as the arguments.
SCRIPT = '<tool_call>\n{"name": "say", "arguments": "Hello, World!"}\n</tool_call>'


@pytest.fixture(scope="module")
def live(tokenizer) -> Iterator[LiveServer]:
    server = start_server(scripted_loaded_model(tokenizer, SCRIPT))
    yield server
    server.stop()


def tool(parameters: Any, name: str = "say", **extra: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": parameters, **extra}}


def post(url: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json={"messages": USER, **body}, timeout=60)


def error(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 400, response.text[:300]
    assert "text/event-stream" not in response.headers.get("content-type", "")
    return response.json()["error"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["required", "auto"])
@pytest.mark.parametrize("parameters", [{"type": "string"}, {"type": ["string", "null"]},
                                        {"type": "array", "items": {"type": "string"}}])
def test_parameters_that_are_not_an_object_are_a_400(live, parameters, choice, stream) -> None:
    tools = [tool({"type": "object"}, "other"), tool(parameters)]
    err = error(post(live.url, {"tools": tools, "tool_choice": choice, "stream": stream}))
    assert err["param"] == "tools.1.function.parameters" and err["code"] == "invalid_value", err
    assert "object" in err["message"]


@pytest.mark.parametrize("parameters", [
    {"properties": {"text": {"type": "string"}}, "required": ["text"]},  # no type: an object
    {"type": ["object", "null"], "properties": {"text": {"type": "string"}}},
    {"anyOf": [{"type": "string"}, {"properties": {"text": {"type": "string"}}}]},
])
def test_arguments_are_always_a_json_object(live, parameters) -> None:
    """A schema without ``type`` (or with a list holding ``object``) is read as an object's."""
    r = post(live.url, {"tools": [tool(parameters)], "tool_choice": "required", "max_tokens": 40})
    assert r.status_code == 200, r.text[:300]
    call = r.json()["choices"][0]["message"]["tool_calls"][0]
    assert isinstance(json.loads(call["function"]["arguments"]), dict), call


@pytest.mark.parametrize("strict", [False, True])
def test_an_invalid_tool_schema_is_reported_at_the_tool(live, strict) -> None:
    bad = {"type": "object", "properties": {"a": {"type": "wat"}}}
    tools = [tool({"type": "object"}, "ok"), tool(bad, strict=strict)]
    err = error(post(live.url, {"tools": tools}))
    assert err["code"] == "invalid_schema" and err["param"] == "tools.1.function.parameters", err
    assert "(at $.tools[1].function.parameters.properties.a.type)" in err["message"], err


def test_a_duplicate_tool_name_is_reported_at_the_second_name(live) -> None:
    err = error(post(live.url, {"tools": [tool({}), tool({}, "x"), tool({})]}))
    assert err["param"] == "tools.2.function.name", err


@pytest.mark.parametrize("schema", [{"$schema": 5}, {"type": "wat"}])
def test_a_response_format_schema_error_is_reported_at_the_schema(live, schema) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    err = error(post(live.url, {"response_format": fmt}))
    assert err["code"] == "invalid_schema" and err["param"] == "response_format.json_schema.schema", err
