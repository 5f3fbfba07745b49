"""langchain-openai's ChatOpenAI: ``with_structured_output`` (json_schema, function_calling) and
``bind_tools`` streamed, with the chunks aggregated by ``+`` into tool calls."""

from __future__ import annotations

import functools
import operator

import pytest
from langchain_core.messages import AIMessageChunk
from langchain_openai import ChatOpenAI

from .conftest import CITY_PROMPT, MAX_TOKENS, WEATHER_PROMPT, City, CompatServer, Weather, Wire, tool_schema

pytestmark = pytest.mark.model


def _chat(server: CompatServer, **kwargs) -> ChatOpenAI:
    return ChatOpenAI(model=server.model, base_url=server.base_url, api_key="unused", temperature=0,
                      max_tokens=MAX_TOKENS, max_retries=0, timeout=120, **kwargs)


def test_structured_output_json_schema(compat_server: CompatServer, wire: Wire) -> None:
    city = _chat(compat_server).with_structured_output(City, method="json_schema").invoke(CITY_PROMPT)
    assert isinstance(city, City) and city.name and city.country
    fmt = wire.last["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True


def test_structured_output_function_calling(compat_server: CompatServer, wire: Wire) -> None:
    out = _chat(compat_server).with_structured_output(
        Weather, method="function_calling", include_raw=True).invoke(WEATHER_PROMPT)
    weather = out["parsed"]
    assert out["parsing_error"] is None
    assert isinstance(weather, Weather) and weather.unit in ("c", "f")
    # The call holds the declared keys only (a tool invoked as fn(**args) takes no others), and
    # was not cut by max_tokens.
    assert set(out["raw"].tool_calls[0]["args"]) == {"city", "unit"}
    assert out["raw"].response_metadata["finish_reason"] != "length"
    assert wire.last["tool_choice"] == {"type": "function", "function": {"name": "Weather"}}
    assert "strict" not in tool_schema(wire.last, "Weather")  # strict=None: not sent


def test_bind_tools_stream_aggregates_tool_calls(compat_server: CompatServer, wire: Wire) -> None:
    chat = _chat(compat_server).bind_tools([Weather], tool_choice="required", strict=True,
                                           parallel_tool_calls=False)
    chunks = list(chat.stream(WEATHER_PROMPT))
    assert len(chunks) >= 3 and all(isinstance(c, AIMessageChunk) for c in chunks)
    message = functools.reduce(operator.add, chunks)
    assert len(message.tool_calls) == 1 and not message.invalid_tool_calls
    call = message.tool_calls[0]
    assert call["name"] == "Weather" and call["id"].startswith("call_")
    weather = Weather.model_validate(call["args"])
    assert weather.unit in ("c", "f")
    assert message.response_metadata.get("finish_reason") == "tool_calls"
    assert wire.last["stream"] is True and tool_schema(wire.last, "Weather")["strict"] is True
