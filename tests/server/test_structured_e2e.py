"""response_format through the real grammar compiler (scripted model, real HTTP)."""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest

from .conftest import USER, decode, stream_raw

pytest.importorskip("afm_struct.grammar.compiler")

DOC = '{"name": "Ada", "age": 36}'
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


def _fmt(schema: dict, strict: bool = True) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "person", "strict": strict, "schema": schema}}


def _content(events: list) -> tuple[str, int]:
    pieces = [e["choices"][0]["delta"]["content"] for e in events
              if e["choices"] and e["choices"][0]["delta"].get("content")]
    return "".join(pieces), len(pieces)


def test_enforced_schema_streams_valid_json(serve) -> None:
    live = serve(DOC)
    response, payloads = stream_raw(live.url, {"messages": USER, "response_format": _fmt(SCHEMA)})
    assert response.status_code == 200
    assert "x-grammar-constraints" not in response.headers
    content, pieces = _content(decode(payloads))
    assert json.loads(content) == {"name": "Ada", "age": 36} and pieces > 1


def test_mask_keeps_fences_out_even_when_the_model_wants_them(serve) -> None:
    live = serve('```json\n{"name": "Ada", "age": 36}\n```')
    r = httpx.post(f"{live.url}/v1/chat/completions", timeout=60,
                   json={"messages": USER, "response_format": _fmt(SCHEMA), "max_tokens": 60})
    content = r.json()["choices"][0]["message"]["content"]
    assert "```" not in content
    value = json.loads(content)
    assert set(value) == {"name", "age"} and isinstance(value["age"], int)


def test_json_object_mode_yields_an_object(serve) -> None:
    live = serve('{"ok": true}')
    r = httpx.post(f"{live.url}/v1/chat/completions", timeout=60,
                   json={"messages": USER, "response_format": {"type": "json_object"}})
    assert json.loads(r.json()["choices"][0]["message"]["content"]) == {"ok": True}
    assert "x-grammar-constraints" not in r.headers


def test_strict_schema_that_must_be_relaxed_sets_the_downgrade_header(serve) -> None:
    # a lookbehind pattern is outside what a token mask can enforce exactly (a lookahead after
    # ^ is rewritten as a regular language since issue 31)
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^(?<!x)[a-z]+$"}},
              "required": ["code"]}
    live = serve('{"code": "abc"}')
    r = httpx.post(f"{live.url}/v1/chat/completions", timeout=60,
                   json={"messages": USER, "response_format": _fmt(schema), "max_tokens": 40})
    assert r.status_code == 200
    assert r.headers.get("x-grammar-constraints") == "downgraded"
    content = r.json()["choices"][0]["message"]["content"]
    assert json.loads(content) == {"code": "abc"}
    # the same schema without strict runs best-effort too, but is not flagged
    r = httpx.post(f"{live.url}/v1/chat/completions", timeout=60,
                   json={"messages": USER, "response_format": _fmt(schema, strict=False), "max_tokens": 40})
    assert r.status_code == 200 and "x-grammar-constraints" not in r.headers


def test_tool_grammar_and_json_response_format_share_one_mask(serve) -> None:
    tool = {"type": "function", "function": {"name": "get_time", "strict": True,
                                             "parameters": {"type": "object", "properties": {},
                                                            "additionalProperties": False}}}
    live = serve('```json\n{"name": "Ada", "age": 36}\n```')
    r = httpx.post(f"{live.url}/v1/chat/completions", timeout=60, json={
        "messages": USER, "tools": [tool], "tool_choice": "auto", "response_format": _fmt(SCHEMA),
        "temperature": 0})
    assert r.status_code == 200
    # one grammar: a call or the schema's answer, both exact (the fences cannot be written)
    assert "x-grammar-constraints" not in r.headers and r.headers["x-afm-constraint-mode"] == "exact"
    message = r.json()["choices"][0]["message"]
    if message.get("tool_calls"):
        assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_time"]
    else:
        jsonschema.validate(json.loads(message["content"]), SCHEMA)
    r = httpx.post(f"{live.url}/v1/chat/completions", timeout=60, json={
        "messages": USER, "tools": [tool], "tool_choice": "auto"})
    assert r.status_code == 200 and "x-grammar-constraints" not in r.headers  # the tool grammar is exact
