"""langchain-openai's ChatOpenAI on the Responses API (``use_responses_api=True``):
``with_structured_output`` (a strict ``text.format``) and ``bind_tools`` streamed, with the chunks
aggregated by ``+`` into one tool call."""

from __future__ import annotations

import functools
import json
import operator

import pytest
from langchain_core.messages import AIMessageChunk
from langchain_openai import ChatOpenAI

from .conftest import (
    CITY_PROMPT,
    MAX_TOKENS,
    WEATHER_PROMPT,
    City,
    CompatServer,
    Weather,
    Wire,
    response_tool,
)

pytestmark = pytest.mark.model


def _chat(server: CompatServer) -> ChatOpenAI:
    return ChatOpenAI(model=server.model, base_url=server.base_url, api_key="unused", temperature=0,
                      max_tokens=MAX_TOKENS, max_retries=0, timeout=120, use_responses_api=True)


def test_structured_output(compat_server: CompatServer, wire: Wire) -> None:
    city = _chat(compat_server).with_structured_output(City).invoke(CITY_PROMPT)
    assert isinstance(city, City) and city.name and city.country
    assert [e.path for e in wire.exchanges] == ["/v1/responses"]
    fmt = wire.last["text"]["format"]
    assert fmt["type"] == "json_schema" and fmt["strict"] is True
    assert json.loads(wire.exchanges[-1].body)["status"] == "completed"


def test_bind_tools_stream_aggregates_tool_calls(compat_server: CompatServer, wire: Wire) -> None:
    chat = _chat(compat_server).bind_tools([Weather], tool_choice="required", strict=True,
                                           parallel_tool_calls=False)
    chunks = list(chat.stream(WEATHER_PROMPT))
    assert len(chunks) >= 3 and all(isinstance(c, AIMessageChunk) for c in chunks)
    message = functools.reduce(operator.add, chunks)
    assert len(message.tool_calls) == 1 and not message.invalid_tool_calls
    call = message.tool_calls[0]
    assert call["name"] == "Weather" and call["id"]
    weather = Weather.model_validate(call["args"])
    assert weather.unit in ("c", "f") and set(call["args"]) == {"city", "unit"}
    assert [e.path for e in wire.exchanges] == ["/v1/responses"]
    assert wire.last["stream"] is True and response_tool(wire.last, "Weather")["strict"] is True
    assert wire.last["tool_choice"] == "required"
    assert b"event: response.function_call_arguments.delta" in wire.exchanges[-1].body
    assert b"event: response.completed" in wire.exchanges[-1].body
