"""Partial values while streaming (``stream_options.include_partial`` / ``X-AFM-Partial``) and
the enforcement report (``X-AFM-Enforcement``) over real HTTP, on one scripted server for the
module: chat chunks, tool-argument partials, the Responses and Messages extension events, the
openai and anthropic SDKs reading opted-in streams, afm_struct.client's ``stream.partials()``,
and a client that does not opt in seeing exactly the stream it saw before."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from pydantic import BaseModel

from afm_struct.client import AsyncClient, Client
from afm_struct.testing import Script, scripted_loaded_model
from server.live import LiveServer, start_server

from .conftest import decode, sse_payloads

ANSWER = ('{"name": "Ada é \\"L\\"", "tags": ["math", "poetry"], '
          '"born": {"year": 1815, "ok": true}, "score": -1.5e2, "note": null}')
CALL = '<tool_call>\n{"name": "lookup", "arguments": {"query": "engines", "limit": 3}}\n</tool_call>'
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
    "born": {"type": "object", "properties": {"year": {"type": "integer"}, "ok": {"type": "boolean"}},
             "required": ["year", "ok"], "additionalProperties": False},
    "score": {"type": "number"}, "note": {"type": "null"}},
    "required": ["name", "tags", "born", "score", "note"], "additionalProperties": False}
# uniqueItems is the one keyword the engine lacks here: the relaxed rung, the answer deferred.
EXACT = {**SCHEMA, "properties": {**SCHEMA["properties"],
                                  "tags": {"type": "array", "items": {"type": "string"}}}}
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
    "required": ["query", "limit"]}}}]
USER = [{"role": "user", "content": "hi"}]
PARTIAL = {"include_partial": True}


def _format(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}}


@pytest.fixture(scope="module")
def live(tokenizer: Any) -> Iterator[LiveServer]:
    def answer(ids: list[int]) -> str:
        return CALL if "lookup" in tokenizer.decode(ids) else ANSWER

    server = start_server(scripted_loaded_model(tokenizer, Script(answer)))
    yield server
    server.stop()


def _chat(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> list[dict[str, Any]]:
    with httpx.stream("POST", f"{url}/v1/chat/completions", json={"stream": True, **body},
                      headers=headers or {}, timeout=120) as response:
        assert response.status_code == 200, response.read()
        return decode(sse_payloads(response.iter_lines()))


def _events(url: str, path: str, body: dict[str, Any], headers: dict[str, str] | None = None,
            ) -> list[dict[str, Any]]:
    """The data of each SSE event of a Responses / Messages stream (their ``event:`` lines
    dropped)."""
    with httpx.stream("POST", f"{url}{path}", json={"stream": True, **body}, headers=headers or {},
                      timeout=120) as response:
        assert response.status_code == 200, response.read()
        return [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]


def _content_partials(chunks: list[dict[str, Any]]) -> tuple[str, list[Any]]:
    text, partials = "", []
    for chunk in chunks:
        for choice in chunk.get("choices", []):
            text += choice["delta"].get("content") or ""
            if "afm_partial" in choice:
                assert choice["delta"].get("content"), "a partial rides a content chunk only"
                partials.append(choice["afm_partial"])
    return text, partials


@pytest.mark.parametrize("schema", [EXACT, SCHEMA], ids=["exact", "deferred"])
def test_every_content_chunk_carries_the_value_so_far_and_the_last_is_the_object(live, schema) -> None:
    chunks = _chat(live.url, {"messages": USER, "response_format": _format(schema),
                              "stream_options": PARTIAL})
    text, partials = _content_partials(chunks)
    final = json.loads(text)
    assert partials and partials[-1] == final
    content_chunks = sum(1 for c in chunks for ch in c["choices"] if ch["delta"].get("content"))
    if schema is EXACT:  # streamed as generated: every chunk, once the text parses (from "{")
        assert len(partials) == content_chunks > 10
        grown = ""
        for chunk in chunks:
            for choice in chunk["choices"]:
                grown += choice["delta"].get("content") or ""
                if "afm_partial" in choice:  # the value of the text so far, not of the chunk
                    assert json.loads(json.dumps(choice["afm_partial"])) == choice["afm_partial"]
                    assert len(json.dumps(choice["afm_partial"])) <= len(json.dumps(final))
        assert partials[0] == {} and {"name": "Ada é \"L\""}.items() <= partials[-1].items()
    else:  # best-effort: held back, sanitized, one chunk
        assert len(partials) == content_chunks == 1


def test_tool_argument_partials_by_call_index(live) -> None:
    chunks = _chat(live.url, {"messages": [{"role": "user", "content": "lookup engines"}], "tools": TOOLS,
                              "stream_options": PARTIAL})
    arguments, partials = "", []
    for chunk in chunks:
        for choice in chunk["choices"]:
            assert "afm_partial" not in choice
            for call in choice["delta"].get("tool_calls") or []:
                arguments += call["function"].get("arguments") or ""
            if "afm_partial_arguments" in choice:
                assert choice["afm_partial_arguments"]["index"] == 0
                partials.append(choice["afm_partial_arguments"]["value"])
    assert json.loads(arguments) == {"query": "engines", "limit": 3} == partials[-1]
    # an unfinished string is kept as far as written; an unfinished number is left out
    assert any(p.get("query") and p["query"] != "engines" for p in partials)
    assert all(set(p) <= {"query", "limit"} for p in partials) and len(partials) > 3


def _normalized(chunks: list[dict[str, Any]]) -> list[str]:
    """Each chunk as JSON with its id, creation time and call ids blanked, AFM partial fields
    dropped: what must not change when a client opts in."""
    out = []
    for chunk in chunks:
        chunk = {**chunk, "id": "", "created": 0}
        for choice in chunk.get("choices", []):
            choice.pop("afm_partial", None)
            choice.pop("afm_partial_arguments", None)
            for call in choice["delta"].get("tool_calls") or []:
                if "id" in call:
                    call["id"] = ""
        out.append(json.dumps(chunk))
    return out


@pytest.mark.parametrize("body", [
    {"messages": USER, "response_format": _format(EXACT)},
    {"messages": [{"role": "user", "content": "lookup"}], "tools": TOOLS},
    {"messages": USER},
], ids=["json", "tools", "text"])
def test_a_client_that_does_not_opt_in_sees_no_change(live, body) -> None:
    plain = _chat(live.url, body)
    opted = _chat(live.url, {**body, "stream_options": PARTIAL})
    assert not any(key.startswith("afm_") for c in plain for ch in c["choices"] for key in ch)
    assert _normalized(plain) == _normalized(opted)
    # and opting in on a text answer adds nothing: no JSON to parse
    if "response_format" not in body and "tools" not in body:
        assert not any("afm_partial" in ch for c in opted for ch in c["choices"])


def test_openai_sdk_stream_helper_reads_an_opted_in_stream(live) -> None:
    client = openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", max_retries=0, timeout=120)
    with client.chat.completions.stream(model="scripted", messages=USER, response_format=_format(EXACT),
                                        extra_body={"stream_options": PARTIAL}) as stream:
        partials = [event.chunk.choices[0].model_extra["afm_partial"] for event in stream
                    if event.type == "chunk" and event.chunk.choices
                    and "afm_partial" in (event.chunk.choices[0].model_extra or {})]
        final = stream.get_final_completion()
    assert partials[-1] == json.loads(final.choices[0].message.content)


class Born(BaseModel):
    year: int
    ok: bool


class Person(BaseModel):
    name: str
    tags: list[str]
    born: Born
    score: float
    note: None = None


def test_client_stream_partials_typed_with_the_model(live) -> None:
    with Client(live.url) as client:
        values = list(client.stream(USER, partial=True, response_format=_format(EXACT)).partials(Person))
        plain = list(client.stream(USER, partial=True, response_format=_format(EXACT)).partials())
        with pytest.raises(ValueError, match="partial=True"):
            list(client.stream(USER, response_format=_format(EXACT)).partials())
    assert all(isinstance(v, Person) for v in values)
    assert Person.model_validate(plain[-1]) == Person.model_validate(json.loads(ANSWER))
    assert values[-1].name == 'Ada é "L"' and values[-1].born == {"year": 1815, "ok": True}  # not recursed
    assert not hasattr(values[0], "name")  # not written yet: unset, not invented


def test_client_enforcement_and_async_partials(live) -> None:
    with Client(live.url) as client:
        whole = client.chat(USER, stream=False, enforcement=True, response_format=_format(SCHEMA))
        streamed = client.chat(USER, enforcement=True, response_format=_format(SCHEMA))
        plain = client.chat(USER, response_format=_format(SCHEMA))
    assert whole.enforcement == streamed.enforcement and whole.enforcement["rung"] == "relaxed"
    assert plain.enforcement is None

    async def partials() -> list[Any]:
        async with AsyncClient(live.url) as client:
            return [p async for p in client.stream(USER, partial=True,
                                                   response_format=_format(EXACT)).partials(Person)]

    values = asyncio.run(partials())
    assert len(values) > 10 and values[-1].tags == ["math", "poetry"]


def test_responses_partial_events(live) -> None:
    body = {"input": "lookup", "tools": [{"type": "function", "name": "lookup",
                                          "parameters": TOOLS[0]["function"]["parameters"]}]}
    events = _events(live.url, "/v1/responses", {**body, "stream_options": PARTIAL})
    partial = [e for e in events if e["type"] == "afm.function_call_arguments.partial"]
    done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    assert partial and partial[-1]["partial"] == json.loads(done["arguments"])
    assert {p["item_id"] for p in partial} == {done["item_id"]}
    seq = [e["sequence_number"] for e in events]
    assert seq == list(range(len(seq)))
    text = {"input": "hi", "text": {"format": {"type": "json_schema", "name": "p", "schema": EXACT,
                                               "strict": True}}}
    events = _events(live.url, "/v1/responses", {**text, "stream_options": PARTIAL})
    partial = [e["partial"] for e in events if e["type"] == "afm.output_text.partial"]
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert len(partial) == len(deltas) and partial[-1] == json.loads(ANSWER)
    plain = _events(live.url, "/v1/responses", text)
    assert not any(e["type"].startswith("afm.") for e in plain)
    assert [e["type"] for e in plain] == [e["type"] for e in events if not e["type"].startswith("afm.")]


def test_messages_partial_events_and_the_anthropic_sdk(live) -> None:
    body = {"model": "scripted", "max_tokens": 300, "messages": USER,
            "output_config": {"format": {"type": "json_schema", "schema": EXACT}}}
    events = _events(live.url, "/v1/messages", body, {"X-AFM-Partial": "true"})
    partial = [e for e in events if e["type"] == "afm_partial"]
    assert partial and partial[-1]["partial"] == json.loads(ANSWER) and {p["index"] for p in partial} == {0}
    assert not any(e["type"] == "afm_partial" for e in _events(live.url, "/v1/messages", body))
    client = anthropic.Anthropic(base_url=live.url, api_key="unused", max_retries=0, timeout=120)
    stream = client.messages.create(**body, stream=True, extra_headers={"X-AFM-Partial": "true"})
    kinds = [event.type for event in stream]  # the SDK passes the extension events through
    assert "afm_partial" in kinds and kinds[-1] == "message_stop"


def test_enforcement_report_in_the_body_and_as_the_final_stream_event(live) -> None:
    headers = {"X-AFM-Enforcement": "true", "X-AFM-Profile": "true"}
    body = {"messages": USER, "response_format": _format(SCHEMA)}
    whole = httpx.post(f"{live.url}/v1/chat/completions", json=body, headers=headers, timeout=120).json()
    report = whole["afm_enforcement"]
    assert report["rung"] == "relaxed" and report["reason"] == "unsupported_keyword:uniqueItems"
    dropped = [(e["path"], e["keyword"]) for e in report["keywords"] if e["status"] == "validated"]
    assert dropped == [("/properties/tags", "uniqueItems")]
    chunks = _chat(live.url, {**body, "stream_options": {"include_usage": True}}, headers)
    assert list(chunks[-2]) == ["afm_enforcement"] and list(chunks[-1]) == ["afm_profile"]
    assert chunks[-2]["afm_enforcement"] == report
    exact = httpx.post(f"{live.url}/v1/chat/completions", json={**body, "response_format": _format(EXACT)},
                       headers=headers, timeout=120).json()["afm_enforcement"]
    assert exact["rung"] == "exact" and exact["counts"]["validated"] == exact["counts"]["relaxed"] == 0
    plain = httpx.post(f"{live.url}/v1/chat/completions", json=body, timeout=120).json()
    assert "afm_enforcement" not in plain
    # the Responses and Messages doors: in the final object
    response = httpx.post(f"{live.url}/v1/responses", headers=headers, timeout=120, json={
        "input": "hi", "text": {"format": {"type": "json_schema", "name": "p", "schema": SCHEMA}}}).json()
    assert response["afm_enforcement"]["rung"] == "relaxed"
    events = _events(live.url, "/v1/messages", {"model": "scripted", "max_tokens": 300, "messages": USER,
                                                "output_config": {"format": {"type": "json_schema",
                                                                             "schema": SCHEMA}}}, headers)
    assert [e["type"] for e in events][-3:] == ["afm_enforcement", "message_delta", "message_stop"]


def test_a_format_beside_tools_is_reported_as_the_answer_branch_runs_it(live) -> None:
    """Chat with tools and a format: the tool grammar holds the format as its answer branch
    (issue 49.1), exact; with ``tool_choice: required`` no answer can be written and the
    format runs without its mask (reported unconstrained, every keyword only validated)."""
    body = {"messages": USER, "tools": TOOLS, "response_format": _format(EXACT)}
    headers = {"X-AFM-Enforcement": "true"}
    report = httpx.post(f"{live.url}/v1/chat/completions", json=body, timeout=120,
                        headers=headers).json()["afm_enforcement"]
    assert report["rung"] == "exact" and report["counts"]["validated"] == report["counts"]["relaxed"] == 0
    calls = httpx.post(f"{live.url}/v1/chat/completions", json={**body, "tool_choice": "required"},
                       timeout=120, headers=headers).json()["afm_enforcement"]
    assert calls["rung"] == "unconstrained" and calls["counts"]["validated"] == len(calls["keywords"]) > 0
