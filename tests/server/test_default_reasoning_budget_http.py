"""Reasoning never starves a constrained answer (issue 48): a constrained request on a thinking
model that sets no budget gets one (half of max_tokens, never the answer's shortest form), said
in ``X-AFM-Reasoning-Budget``; ``max_reasoning_tokens`` and ``reasoning.effort`` override it.

The scripted model thinks far longer than max_tokens, then answers: without the default, its
thought takes the whole budget and the closer writes the shortest valid stub (``length``)."""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest

from afm_struct.serving.reasoning_budget import HEADER, MIN_THINKING, default_reasoning_budget

from .conftest import USER, decode, stream_raw

THOUGHT = "Let me weigh each option in turn, slowly and with care, before I answer. " * 12
ANSWER = '{"name": "Ada", "age": 36}'
SCRIPT = f"<think>{THOUGHT}</think>\n\n{ANSWER}"
PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 8},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120}}}
FORMAT = {"type": "json_schema", "json_schema": {"name": "person", "strict": True, "schema": PERSON}}


def post(url: str, body: dict) -> httpx.Response:
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text[:400]
    return r


def test_the_default_leaves_room_for_the_answer(serve, tokenizer) -> None:
    live = serve(SCRIPT, reasoning="think")
    body = {"messages": USER, "max_tokens": 120, "response_format": FORMAT, "temperature": 0}
    r = post(live.url, body)
    assert r.headers[HEADER] == "60; source=default; max_tokens=120"
    choice = r.json()["choices"][0]
    reasoning = choice["message"]["reasoning_content"]
    assert THOUGHT.startswith(reasoning) and len(tokenizer.encode(reasoning)) <= 60
    # The block was left with room to spare: the answer ends by itself, valid, not cut.
    assert choice["finish_reason"] == "stop"
    jsonschema.validate(json.loads(choice["message"]["content"]), PERSON)
    response, payloads = stream_raw(live.url, body)
    assert response.headers[HEADER] == r.headers[HEADER]
    deltas = [c["choices"][0]["delta"] for c in decode(payloads) if c.get("choices")]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == reasoning
    assert "".join(d.get("content") or "" for d in deltas) == choice["message"]["content"]


def test_max_reasoning_tokens_overrides_the_default(serve) -> None:
    """The request's own budget wins, even one that lets thinking take everything (then the
    closer writes the shortest valid answer: ``length``, as before the default existed)."""
    live = serve(SCRIPT, reasoning="think")
    r = post(live.url, {"messages": USER, "max_tokens": 120, "response_format": FORMAT,
                        "max_reasoning_tokens": 10_000})
    assert HEADER not in r.headers
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "length"
    jsonschema.validate(json.loads(choice["message"]["content"]), PERSON)


def test_responses_effort_overrides_the_default(serve) -> None:
    live = serve(SCRIPT, reasoning="think")
    r = httpx.post(f"{live.url}/v1/responses", timeout=60, json={
        "input": "hi", "max_output_tokens": 120, "reasoning": {"effort": "high"},
        "text": {"format": {"type": "json_schema", "name": "person", "strict": True, "schema": PERSON}}})
    assert r.status_code == 200, r.text[:400]
    assert HEADER not in r.headers
    r = httpx.post(f"{live.url}/v1/responses", timeout=60, json={
        "input": "hi", "max_output_tokens": 120,
        "text": {"format": {"type": "json_schema", "name": "person", "strict": True, "schema": PERSON}}})
    assert r.status_code == 200, r.text[:400]
    assert r.headers[HEADER].startswith("60; source=default")


def test_unconstrained_requests_get_no_default(serve) -> None:
    live = serve(SCRIPT, reasoning="think")
    r = post(live.url, {"messages": USER, "max_tokens": 120})
    assert HEADER not in r.headers
    assert r.json()["choices"][0]["finish_reason"] == "length"


def test_max_tokens_too_small_for_both_is_said(serve) -> None:
    live = serve(SCRIPT, reasoning="think")
    r = post(live.url, {"messages": USER, "max_tokens": 24, "response_format": FORMAT})
    value = r.headers[HEADER]
    tokens = int(value.split(";")[0])
    assert tokens < MIN_THINKING
    assert 'note="max_tokens leaves' in value and "raise max_tokens or set max_reasoning_tokens" in value
    jsonschema.validate(json.loads(r.json()["choices"][0]["message"]["content"]), PERSON)


@pytest.mark.parametrize(("max_tokens", "floor", "tokens"),
                         [(120, 10, 60), (121, 10, 60), (30, 20, 10), (10, 12, 0), (0, 0, 0)])
def test_default_budget_numbers(max_tokens: int, floor: int, tokens: int) -> None:
    budget = default_reasoning_budget(max_tokens, floor)
    assert budget.tokens == tokens
    assert budget.tokens + floor <= max(max_tokens, floor)
