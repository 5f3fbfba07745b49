"""The Responses side of the randomized HTTP traffic test (test_randomized_http.py): a chat body
drawn by the test rewritten as the same request on ``POST /v1/responses``, a streamed response
read and checked event by event, and a response object reduced to what the test compares
across protocols (finish reason, text, tool calls)."""

from __future__ import annotations

import json
from typing import Any

import httpx

from .responses_client import TERMINAL, check_sequence

# The terminal event each final status must end the stream with.
TERMINAL_OF = {"completed": "response.completed", "incomplete": "response.incomplete",
               "cancelled": "response.incomplete", "failed": "response.failed"}


def responses_body(body: dict[str, Any]) -> dict[str, Any]:
    """The chat-completions ``body`` as a Responses request (no ``stop``: the Responses API has
    none, so the caller draws none); tools in the flat shape."""
    assert "stop" not in body
    out: dict[str, Any] = {"input": body["messages"][0]["content"], "max_output_tokens": body["max_tokens"],
                           "temperature": body["temperature"], "seed": body["seed"], "store": False}
    fmt = body.get("response_format")
    if fmt is not None and fmt["type"] == "json_schema":
        spec = fmt["json_schema"]
        out["text"] = {"format": {"type": "json_schema", "name": spec["name"], "strict": spec["strict"],
                                  "schema": spec["schema"]}}
    elif fmt is not None:
        out["text"] = {"format": {"type": fmt["type"]}}
    if "tools" in body:
        out["tools"] = [{"type": "function", **t["function"]} for t in body["tools"]]
        out["tool_choice"] = body["tool_choice"]
        out["parallel_tool_calls"] = body["parallel_tool_calls"]
    return out


def answer_of(response: dict[str, Any]) -> tuple[str, str | None, list[dict[str, Any]] | None]:
    """(finish reason in chat's words, text, tool calls in chat's shape) of a response object,
    asserting that its status and details agree."""
    status = response["status"]
    details = response.get("incomplete_details")
    assert status in ("completed", "incomplete", "cancelled"), (status, response.get("error"))
    if status == "incomplete":
        assert details == {"reason": "max_output_tokens"}, details
    else:
        assert details is None, (status, details)
    texts = [part["text"] for item in response["output"] if item["type"] == "message"
             for part in item["content"] if part["type"] == "output_text"]
    calls = [{"function": {"name": item["name"], "arguments": item["arguments"]}}
             for item in response["output"] if item["type"] == "function_call"]
    if status == "cancelled":
        reason = "cancelled"
    elif status == "incomplete":
        reason = "length"
    else:
        reason = "tool_calls" if calls else "stop"
    return reason, "".join(texts) if texts else None, calls or None


def parse_events(lines: list[str]) -> list[dict[str, Any]]:
    """The events of a whole SSE body, asserting the framing: an ``event:`` line naming the
    payload's type, a ``data:`` line, a blank line; sequence numbers from 0."""
    events: list[dict[str, Any]] = []
    assert len(lines) % 3 == 0, lines[-3:]
    for i in range(0, len(lines), 3):
        assert lines[i].startswith("event: ") and lines[i + 1].startswith("data: "), lines[i:i + 2]
        assert lines[i + 2] == "", lines[i + 2]
        payload = json.loads(lines[i + 1][len("data: "):])
        assert payload["type"] == lines[i][len("event: "):] and payload["sequence_number"] == len(events)
        events.append(payload)
    return events


def check_stream(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The final response of a whole stream, asserting that it ends exactly once, with the
    terminal event its status calls for, and that the deltas add up to the items' text."""
    check_sequence(events)
    terminals = [e for e in events if e["type"] in TERMINAL]
    assert len(terminals) == 1 and terminals[0] is events[-1], [e["type"] for e in events[-3:]]
    final = events[-1]["response"]
    assert events[-1]["type"] == TERMINAL_OF[final["status"]], (events[-1]["type"], final["status"])
    for item in final["output"]:
        deltas = "".join(e["delta"] for e in events if e.get("item_id") == item["id"]
                         and e["type"] in ("response.output_text.delta",
                                           "response.function_call_arguments.delta"))
        if item["type"] == "message":
            assert deltas == "".join(p["text"] for p in item["content"]), item
        elif item["type"] == "function_call":
            assert deltas == item["arguments"], item
    return final


async def cancel_response(client: httpx.AsyncClient, url: str, response_id: str) -> int:
    """POST /v1/responses/{id}/cancel: 200 with the response ``cancelled``, or 404 (finished)."""
    r = await client.post(f"{url}/v1/responses/{response_id}/cancel")
    assert r.status_code in (200, 404), r.text
    if r.status_code == 200:
        body = r.json()
        assert body["id"] == response_id and body["status"] == "cancelled", body
    else:
        assert r.json()["error"]["type"] == "not_found_error", r.text
    return r.status_code
