"""A whole tool call followed by a next one that cannot fit the budget ends with ``tool_calls``.

Before: a complete call with budget left (34 of 48 tokens, parallel calls allowed) ended with
``length`` (the budget closer refused the second call the model began), so the openai SDK's
``parse`` raised ``LengthFinishReasonError``.  A call actually cut by the budget still ends with
``length``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from afm_struct.testing import scripted_loaded_model
from afm_struct.tools import ToolCallRouter, load_table
from afm_struct.turn.outputs import FinishReason
from server.live import LiveServer, start_server

from ..server.conftest import decode, stream_raw
from .conftest import WEATHER, assemble

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "%s", "unit": "celsius"}}\n</tool_call>'
TWO = CALL % "Paris" + "\n" + CALL % "Lyon"
USER = [{"role": "user", "content": "Weather in Paris and Lyon?"}]


@pytest.fixture(scope="module")
def live(tokenizer) -> Iterator[LiveServer]:
    server = start_server(scripted_loaded_model(tokenizer, TWO))
    yield server
    server.stop()


def ask(url: str, *, stream: bool, **extra: Any) -> tuple[str, list[dict[str, Any]], int]:
    """(finish_reason, calls, completion tokens) of one request."""
    body = {"messages": USER, "tools": [WEATHER], "tool_choice": "required", "temperature": 0,
            "stream_options": {"include_usage": True}, **extra}
    if stream:
        response, payloads = stream_raw(url, body)
        assert response.status_code == 200, response.text
        chunks = decode(payloads)
        deltas = [c["choices"][0]["delta"] for c in chunks if c.get("choices")]
        reasons = [c["choices"][0]["finish_reason"] for c in chunks
                   if c.get("choices") and c["choices"][0]["finish_reason"]]
        return reasons[-1], assemble(deltas)["tool_calls"], chunks[-1]["usage"]["completion_tokens"]
    r = httpx.post(f"{url}/v1/chat/completions", json={**body, "stream": False}, timeout=60)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    calls = [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
             for c in choice["message"].get("tool_calls") or ()]
    return choice["finish_reason"], calls, r.json()["usage"]["completion_tokens"]


def first_call_tokens(url: str) -> int:
    """Tokens of the first whole call (one call allowed: the grammar ends after it)."""
    reason, calls, used = ask(url, stream=False, max_tokens=200, parallel_tool_calls=False)
    assert reason == "tool_calls" and len(calls) == 1
    return used


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("spare", [0, 1, 4, 8])
@pytest.mark.parametrize("close", [True, False])
def test_a_whole_call_then_no_room_for_the_next_ends_with_tool_calls(live, spare, stream, close) -> None:
    n = first_call_tokens(live.url)
    reason, calls, used = ask(live.url, stream=stream, max_tokens=n + spare, afm_close_on_length=close)
    if not close and spare:
        # Without budget-aware closing the model begins the second call and is cut in it.
        assert reason == "length"
        return
    assert reason == "tool_calls", (spare, used)
    assert [json.loads(c["arguments"])["city"] for c in calls] == ["Paris"]
    assert used == n


@pytest.mark.parametrize("stream", [False, True])
def test_a_call_cut_by_the_budget_still_ends_with_length(live, stream) -> None:
    n = first_call_tokens(live.url)
    reason, calls, _ = ask(live.url, stream=stream, max_tokens=n - 4)
    assert reason == "length"
    assert len(calls) == 1 and isinstance(json.loads(calls[0]["arguments"]), dict)  # closed
    full, _, _ = ask(live.url, stream=stream, max_tokens=400)  # both calls fit: the model stops
    assert full == "tool_calls"


@pytest.mark.parametrize("stream", [False, True])
def test_a_close_tag_cut_by_the_budget_is_not_content(live, stream) -> None:
    """Budgets that hold the call but not all of its close tag: the call, and no content (the
    cut tag came back as content '</', '</tool', '</tool_')."""
    n = first_call_tokens(live.url)
    client = openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", max_retries=0, timeout=60)
    for budget in range(n - 4, n):
        request = {"model": "scripted", "messages": USER, "tools": [WEATHER], "tool_choice": "required",
                   "max_tokens": budget, "parallel_tool_calls": False}
        if stream:
            chunks = [c for c in client.chat.completions.create(**request, stream=True) if c.choices]
            content = "".join(c.choices[0].delta.content or "" for c in chunks)
            calls = [t for c in chunks for t in c.choices[0].delta.tool_calls or ()]
            names = [t.function.name for t in calls if t.function.name]
        else:
            message = client.chat.completions.create(**request).choices[0].message
            content, names = message.content or "", [t.function.name for t in message.tool_calls or ()]
        assert (content, names) == ("", ["get_weather"]), budget


def test_the_router_ends_with_tool_calls_only_right_after_a_whole_call() -> None:
    fmt = load_table().get("hermes")
    for text, whole, expected in [
        (CALL % "Paris", True, FinishReason.TOOL_CALLS),
        (CALL % "Paris", False, FinishReason.LENGTH),  # the budget completed something
        (CALL % "Paris" + "\nAnd now I will", True, FinishReason.LENGTH),  # text after it was cut
        ("I will call get_weather", True, FinishReason.LENGTH),  # no call made
    ]:
        router = ToolCallRouter(fmt)
        router.feed(text)
        router.finish()
        assert router.finish_reason(FinishReason.LENGTH, whole=whole) == expected, text
        assert router.finish_reason(FinishReason.STOP) == (
            FinishReason.TOOL_CALLS if router.calls else FinishReason.STOP)


@pytest.mark.model
def test_the_sdk_parses_a_whole_call_with_budget_left(embedded) -> None:
    """The issue's request on the embedded model: one complete call in about 30 of 48 tokens."""
    server = start_server(embedded)
    try:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)
        weather = {"type": "function", "function": {
            "name": "get_weather", "description": "Get the weather for a city", "strict": True,
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"], "additionalProperties": False}}}
        for max_tokens in (40, 48):
            done = client.chat.completions.parse(  # raised LengthFinishReasonError before
                model="SmolLM2-135M-Instruct",
                messages=[{"role": "user", "content": "What is the weather in Paris?"}],
                tools=[weather], tool_choice="required", max_tokens=max_tokens, temperature=0)
            choice = done.choices[0]
            assert choice.finish_reason == "tool_calls" and done.usage.completion_tokens < max_tokens
            assert json.loads(choice.message.tool_calls[0].function.arguments)["city"]
    finally:
        server.stop()
