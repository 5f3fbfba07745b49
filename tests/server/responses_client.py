"""Helpers for Responses API tests over real HTTP: post, and read an SSE stream of named events."""

from __future__ import annotations

import json
from typing import Any

import httpx


def post(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> httpx.Response:
    """POST /v1/responses (not streamed)."""
    return httpx.post(f"{url}/v1/responses", json=body, headers=headers or {}, timeout=60)


def stream_events(url: str, body: dict[str, Any], headers: dict[str, str] | None = None,
                  ) -> tuple[httpx.Response, list[dict[str, Any]]]:
    """POST a streamed request; the response and its events, checking the framing: each event is
    an ``event:`` line naming the payload's ``type``, a ``data:`` line and a blank line, and the
    sequence numbers count up from 0."""
    events: list[dict[str, Any]] = []
    with httpx.stream("POST", f"{url}/v1/responses", json={"stream": True, **body},
                      headers=headers or {}, timeout=60) as response:
        if response.status_code != 200:
            response.read()
            return response, []
        lines = list(response.iter_lines())
    i = 0
    while i < len(lines):
        assert lines[i].startswith("event: "), lines[i]
        assert lines[i + 1].startswith("data: "), lines[i + 1]
        assert lines[i + 2] == "", lines[i + 2]
        payload = json.loads(lines[i + 1][len("data: "):])
        assert payload["type"] == lines[i][len("event: "):]
        assert payload["sequence_number"] == len(events)
        events.append(payload)
        i += 3
    return response, events


def types(events: list[dict[str, Any]]) -> list[str]:
    """The events' types, in order."""
    return [e["type"] for e in events]
