"""docs/protocol.md's Responses API transcript (embedded model, strict json_schema plus one
function tool, streamed) is a valid Responses stream, and the server still streams that request
with the same event sequence."""

from __future__ import annotations

import json
import re
import typing
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from openai.types.responses import ResponseStreamEvent

from .responses_client import check_sequence, collapsed, stream_events, types

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
MARKER = "<!-- responses-transcript: checked by tests/server/test_responses_doc.py -->"
EVENT_MODELS = {model.model_fields["type"].annotation.__args__[0]: model
                for model in typing.get_args(typing.get_args(ResponseStreamEvent)[0])}


def transcript() -> tuple[dict[str, Any], dict[str, str], list[dict[str, Any]]]:
    """(the curl request's body, the response headers, the events) of the documented stream."""
    text = DOC.read_text()
    before, after = text.split(MARKER)
    request = json.loads(re.findall(r"-d '(\{.*\})'`", before)[-1])
    block = after.split("```\n", 1)[1].split("\n```", 1)[0]
    head, body = block.split("\n\n", 1)
    headers = dict(line.split(": ", 1) for line in head.splitlines()[1:])
    events = []
    lines = [line for line in body.splitlines() if line and line != "…"]
    for name, data in zip(lines[::2], lines[1::2], strict=True):
        assert name.startswith("event: ") and data.startswith("data: ")
        payload = json.loads(data[len("data: "):])
        assert payload["type"] == name[len("event: "):]
        events.append(payload)
    return request, headers, events


def test_the_documented_transcript_is_a_valid_responses_stream() -> None:
    request, headers, events = transcript()
    assert request["stream"] is True and request["text"]["format"]["strict"] is True
    assert [t["type"] for t in request["tools"]] == ["function"]
    assert headers["content-type"] == "text/event-stream" and headers["x-request-id"] == "resp-doc-1"
    assert "x-grammar-constraints" not in headers  # the strict schema was enforced
    check_sequence(events)
    for event in events:
        EVENT_MODELS[event["type"]].model_validate(event)
    final = events[-1]["response"]
    assert final["status"] == "completed" and final["tools"][0]["name"] == "get_weather"
    (message,) = final["output"]
    jsonschema.validate(json.loads(message["content"][0]["text"]), request["text"]["format"]["schema"])


@pytest.mark.model
def test_the_server_streams_the_documented_sequence(real_server) -> None:
    request, _, documented = transcript()
    response, events = stream_events(real_server.url, request, headers={"X-Request-ID": "resp-doc-1"})
    assert response.status_code == 200 and "x-grammar-constraints" not in response.headers
    check_sequence(events)
    assert collapsed(types(events)) == collapsed(types(documented))
    (message,) = events[-1]["response"]["output"]
    jsonschema.validate(json.loads(message["content"][0]["text"]), request["text"]["format"]["schema"])
