"""The openai SDK's structured-output helpers: ``parse`` and the ``stream`` helper, with a pydantic
``response_format`` and with ``openai.pydantic_function_tool`` tools (both sent ``strict: true``)."""

from __future__ import annotations

import openai
import pytest

from .conftest import CITY_PROMPT, MAX_TOKENS, WEATHER_PROMPT, City, CompatServer, Weather, Wire, tool_schema

pytestmark = pytest.mark.model


def _client(server: CompatServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120)


def test_parse_response_format(compat_server: CompatServer, wire: Wire) -> None:
    completion = _client(compat_server).chat.completions.parse(
        model=compat_server.model, messages=[{"role": "user", "content": CITY_PROMPT}],
        response_format=City, max_tokens=MAX_TOKENS, temperature=0)
    message = completion.choices[0].message
    assert isinstance(message.parsed, City) and message.parsed.name
    assert City.model_validate_json(message.content) == message.parsed
    fmt = wire.last["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
    assert "x-grammar-constraints" not in wire.exchanges[-1].headers  # enforced, not downgraded


def test_parse_pydantic_function_tool(compat_server: CompatServer, wire: Wire) -> None:
    completion = _client(compat_server).chat.completions.parse(
        model=compat_server.model, messages=[{"role": "user", "content": WEATHER_PROMPT}],
        tools=[openai.pydantic_function_tool(Weather)], tool_choice="required",
        max_tokens=MAX_TOKENS, temperature=0)
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.function.name == "Weather"
    assert isinstance(call.function.parsed_arguments, Weather)
    assert call.function.parsed_arguments.unit in ("c", "f")
    assert tool_schema(wire.last, "Weather")["strict"] is True


def test_stream_helper_response_format(compat_server: CompatServer, wire: Wire) -> None:
    kinds: list[str] = []
    deltas = []
    done = []
    with _client(compat_server).chat.completions.stream(
            model=compat_server.model, messages=[{"role": "user", "content": CITY_PROMPT}],
            response_format=City, max_tokens=MAX_TOKENS, temperature=0) as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "content.delta":
                deltas.append(event)
            elif event.type == "content.done":
                done.append(event)
        final = stream.get_final_completion()
    assert kinds.count("chunk") >= 2 and kinds[0] == "chunk"
    assert len(deltas) >= 2  # enforced: the JSON streams token by token, not in one deferred delta
    assert "".join(d.delta for d in deltas) == deltas[-1].snapshot == done[0].content
    assert isinstance(deltas[-1].parsed, dict)  # partial JSON parsed as it streams
    assert len(done) == 1 and isinstance(done[0].parsed, City)
    assert final.choices[0].message.parsed == done[0].parsed
    assert wire.last["stream"] is True and wire.last["response_format"]["json_schema"]["strict"] is True


def test_stream_helper_pydantic_function_tool(compat_server: CompatServer, wire: Wire) -> None:
    kinds: list[str] = []
    deltas = []
    done = []
    with _client(compat_server).chat.completions.stream(
            model=compat_server.model, messages=[{"role": "user", "content": WEATHER_PROMPT}],
            tools=[openai.pydantic_function_tool(Weather)], tool_choice="required",
            parallel_tool_calls=False, max_tokens=MAX_TOKENS, temperature=0) as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "tool_calls.function.arguments.delta":
                deltas.append(event)
            elif event.type == "tool_calls.function.arguments.done":
                done.append(event)
        final = stream.get_final_completion()
    assert "chunk" in kinds and "content.delta" not in kinds
    assert len(deltas) >= 2 and all(d.name == "Weather" and d.index == 0 for d in deltas)
    assert "".join(d.arguments_delta for d in deltas) == deltas[-1].arguments == done[0].arguments
    assert isinstance(deltas[-1].parsed_arguments, dict)
    assert len(done) == 1 and done[0].name == "Weather" and isinstance(done[0].parsed_arguments, Weather)
    call = final.choices[0].message.tool_calls[0]
    assert final.choices[0].finish_reason == "tool_calls"
    assert call.function.parsed_arguments == done[0].parsed_arguments
    assert tool_schema(wire.last, "Weather")["strict"] is True
