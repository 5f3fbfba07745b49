"""Token details (``stream_options.include_token_details`` / ``X-AFM-Token-Details``) over real
HTTP on one scripted server for the module: per-token text, logprob, alternatives, forced
tokens, constraint pressure and field, the per-field sums at the end; streamed and whole."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from afm_struct.testing import Script, scripted_loaded_model
from server.live import LiveServer, start_server

from .conftest import decode, sse_payloads

ANSWER = '{"name": "Bob", "tags": ["x", "y"]}'
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"},
                                           "tags": {"type": "array", "items": {"type": "string"}}},
          "required": ["name", "tags"], "additionalProperties": False}
# The model wants to write prose; a schema whose strings are digits only fights it.
DIGITS = {"type": "object", "properties": {"n": {"type": "string", "pattern": "^[0-9]{3}$"}},
          "required": ["n"], "additionalProperties": False}
USER = [{"role": "user", "content": "hi"}]
DETAILS = {"include_token_details": True}


def _format(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}


@pytest.fixture(scope="module")
def live(tokenizer: Any) -> Iterator[LiveServer]:
    def answer(ids: list[int]) -> str:
        return "zzzz qqqq wwww" if "prose" in tokenizer.decode(ids) else ANSWER

    server = start_server(scripted_loaded_model(tokenizer, Script(answer)))
    yield server
    server.stop()


def _stream(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> list[dict[str, Any]]:
    with httpx.stream("POST", f"{url}/v1/chat/completions", json={"stream": True, **body},
                      headers=headers or {}, timeout=60) as response:
        assert response.status_code == 200, response.read()
        return decode(sse_payloads(response.iter_lines()))


def _details(events: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]], dict[str, Any] | None]:
    """The streamed content, every token record in order, and the per-field sums event."""
    content, records, fields = [], [], None
    for e in events:
        if "afm_token_fields" in e:
            fields = e["afm_token_fields"]
            continue
        for choice in e.get("choices", []):
            content.append(choice["delta"].get("content") or "")
            records.extend(choice.get("afm_token_details") or [])
    return "".join(content), records, fields


def test_free_decoding_has_no_pressure(live: LiveServer) -> None:
    events = _stream(live.url, {"messages": USER, "stream_options": DETAILS})
    content, records, fields = _details(events)
    assert content == ANSWER
    assert "".join(r["token"] for r in records) == ANSWER  # every token, in order
    assert all(r["pressure"] == 0.0 and not r["forced"] for r in records)
    assert all(r["logprob"] <= 0 and len(r["top"]) == 5 for r in records)
    assert all(r["top"][0]["token"] == r["token"] for r in records)  # the scripted model's favourite
    # Free text is not JSON to the server: one field, the root, holding every token.
    assert fields is not None and list(fields) == ["$"] and fields["$"]["tokens"] == len(records)


def test_constrained_marks_forced_tokens_and_fields(live: LiveServer) -> None:
    events = _stream(live.url, {"messages": USER, "response_format": _format(SCHEMA),
                                "stream_options": DETAILS})
    content, records, fields = _details(events)
    assert json.loads(content) == json.loads(ANSWER)
    forced = [r for r in records if r["forced"]]
    assert forced and all(r["pressure"] is None and r["logprob"] == 0.0 for r in forced)
    # The script agrees with the schema: the mask removed (almost) nothing it wanted.
    assert all(r["pressure"] < 0.01 for r in records if not r["forced"])
    by_field = {r["field"] for r in records}
    assert {"$.name", "$.tags[0]", "$.tags[1]"} <= by_field
    assert fields is not None and fields["$.name"]["tokens"] >= 1
    assert sum(f["tokens"] for f in fields.values()) == len(records)
    assert sum(f["forced"] for f in fields.values()) == len(forced)


def test_pressure_when_the_mask_removes_the_preferred_token(live: LiveServer) -> None:
    events = _stream(live.url, {"messages": [{"role": "user", "content": "prose"}], "max_tokens": 12,
                                "response_format": _format(DIGITS), "stream_options": DETAILS})
    _, records, fields = _details(events)
    sampled = [r for r in records if not r["forced"]]
    assert sampled and max(r["pressure"] for r in sampled) > 0.9
    assert fields is not None
    assert fields["$.n"]["pressure"] > 0.9 and fields["$.n"]["mean_pressure"] > 0


def test_not_asked_means_not_sent(live: LiveServer) -> None:
    events = _stream(live.url, {"messages": USER, "response_format": _format(SCHEMA)})
    assert not any("afm_token_fields" in e for e in events)
    assert not any("afm_token_details" in c for e in events for c in e.get("choices", []))
    assert all(c.get("logprobs") is None for e in events for c in e.get("choices", []))


def test_with_logprobs_keeps_the_requests_own_alternatives(live: LiveServer) -> None:
    events = _stream(live.url, {"messages": USER, "logprobs": True, "top_logprobs": 2,
                                "stream_options": DETAILS})
    _, records, _ = _details(events)
    assert records and all(len(r["top"]) == 2 for r in records)
    lp = [t for e in events for c in e.get("choices", []) if c.get("logprobs")
          for t in c["logprobs"]["content"]]
    assert [t["logprob"] for t in lp] == [r["logprob"] for r in records]


def test_whole_response_by_header(live: LiveServer) -> None:
    r = httpx.post(f"{live.url}/v1/chat/completions", timeout=60,
                   headers={"X-AFM-Token-Details": "true"},
                   json={"messages": USER, "response_format": _format(SCHEMA)})
    assert r.status_code == 200, r.text
    body = r.json()
    records = body["choices"][0]["afm_token_details"]
    assert "".join(t["token"] for t in records) == body["choices"][0]["message"]["content"]
    assert body["choices"][0]["logprobs"] is None  # logprobs were not asked for
    assert "$.name" in body["afm_token_fields"]
    # extract()'s per-field confidence: the leaves of the answer, each from its tokens.
    confidence = body["afm_field_confidence"]
    assert set(confidence) == {"$.name", "$.tags[0]", "$.tags[1]"}
    assert all(0 < c["probability"] <= 1 and c["tokens"] >= 1 for c in confidence.values())
