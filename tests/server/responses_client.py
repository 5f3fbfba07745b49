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


TERMINAL = ("response.completed", "response.incomplete", "response.failed")


def check_sequence(events: list[dict[str, Any]]) -> None:
    """The Responses stream's order: created, in_progress, then items one at a time (added,
    their parts and deltas naming them, done, at increasing output indexes), then one terminal
    event whose output lists the done items; sequence numbers increase."""
    kinds = types(events)
    assert kinds[:2] == ["response.created", "response.in_progress"], kinds[:2]
    assert kinds[-1] in TERMINAL and not set(kinds[:-1]) & set(TERMINAL), kinds
    numbers = [e["sequence_number"] for e in events]
    assert numbers == sorted(set(numbers)), numbers
    ids = {e["response"]["id"] for e in (events[0], events[1], events[-1])}
    assert len(ids) == 1, ids
    open_item: dict[str, Any] | None = None
    done: list[dict[str, Any]] = []
    for event in events[2:-1]:
        kind = event["type"]
        if kind == "error":
            continue
        if kind == "response.output_item.added":
            assert open_item is None, f"{kind} while {open_item} is open"
            assert event["output_index"] == len(done)
            open_item = event["item"]
        elif kind == "response.output_item.done":
            assert open_item is not None and event["item"]["id"] == open_item["id"]
            assert event["output_index"] == len(done)
            done.append(event["item"])
            open_item = None
        else:
            assert open_item is not None, f"{kind} outside an item"
            assert event["item_id"] == open_item["id"] and event["output_index"] == len(done)
    assert open_item is None
    assert events[-1]["response"]["output"] == done


def collapsed(kinds: list[str]) -> list[str]:
    """``kinds`` with each run of one delta type shown once (delta counts vary with tokenization)."""
    out: list[str] = []
    for kind in kinds:
        if not (out and out[-1] == kind and kind.endswith(".delta")):
            out.append(kind)
    return out
