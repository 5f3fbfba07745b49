"""Shared helpers for the tools tests: tool definitions, and the router's events seen as chat
deltas (the chat encoder's view) and assembled."""

from __future__ import annotations

from typing import Any

import pytest

from afm_struct.turn.events import AnswerEvent
from server.chat.encoder import chat_delta

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city", "strict": True,
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "The current time",
                                         "strict": True}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}


def as_deltas(events: list[AnswerEvent]) -> list[dict[str, Any]]:
    """The chat deltas of a router's events (a call's closing has none)."""
    return [d for d in map(chat_delta, events) if d is not None]


def assemble(deltas: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge deltas the way the contract says: text appended, tool calls merged by index."""
    out: dict[str, Any] = {"content": "", "reasoning_content": "", "tool_calls": {}}
    for d in deltas:
        out["content"] += d.get("content") or ""
        out["reasoning_content"] += d.get("reasoning_content") or ""
        for frag in d.get("tool_calls") or ():
            call = out["tool_calls"].setdefault(frag["index"], {"id": None, "name": None, "arguments": ""})
            call["id"] = call["id"] or frag.get("id")
            fn = frag.get("function") or {}
            call["name"] = call["name"] or fn.get("name")
            call["arguments"] += fn.get("arguments") or ""
    out["tool_calls"] = [out["tool_calls"][i] for i in sorted(out["tool_calls"])]
    return out


def check_first_deltas(deltas: list[dict[str, Any]]) -> None:
    """Each call's first delta carries id, type and name; later ones only arguments."""
    seen: set[int] = set()
    for d in deltas:
        for frag in d.get("tool_calls") or ():
            if frag["index"] not in seen:
                seen.add(frag["index"])
                assert frag["id"].startswith("call_") and frag["type"] == "function"
                assert frag["function"]["name"]
            else:
                assert set(frag) == {"index", "function"} and set(frag["function"]) == {"arguments"}


@pytest.fixture
def tools() -> list[dict[str, Any]]:
    """A strict weather tool, a strict no-parameter tool and a non-strict search tool."""
    return [WEATHER, TIME, SEARCH]
