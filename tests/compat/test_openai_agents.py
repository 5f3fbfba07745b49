"""openai-agents with ``OpenAIChatCompletionsModel`` on an AsyncOpenAI client pointed at the server:
a structured ``output_type`` and a ``function_tool`` forced by ``tool_choice="required"``."""

from __future__ import annotations

import json
from typing import Literal

import openai
import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)

from .conftest import CITY_PROMPT, MAX_TOKENS, WEATHER_PROMPT, City, CompatServer, Weather, Wire, tool_schema

pytestmark = pytest.mark.model

set_tracing_disabled(True)  # no trace export (it would try to reach OpenAI)


def _model(server: CompatServer) -> OpenAIChatCompletionsModel:
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120)
    return OpenAIChatCompletionsModel(model=server.model, openai_client=client)


def test_agent_output_type(compat_server: CompatServer, wire: Wire) -> None:
    agent = Agent(name="extractor", instructions="Extract the city.", model=_model(compat_server),
                  output_type=City, model_settings=ModelSettings(max_tokens=MAX_TOKENS, temperature=0))
    result = Runner.run_sync(agent, CITY_PROMPT)
    assert isinstance(result.final_output, City) and result.final_output.name
    assert len(wire.requests) == 1
    fmt = wire.last["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "strict_mode_false"])
def test_function_tool_required(compat_server: CompatServer, wire: Wire, strict: bool) -> None:
    """``function_tool`` under ``tool_choice="required"``: the tool runs once with validated
    arguments.  The default sends ``strict: true``; ``strict_mode=False`` (for schemas OpenAI's
    strict mode refuses) sends ``strict: false``, and the arguments still follow the schema."""
    calls: list[Weather] = []

    def get_weather(city: str, unit: Literal["c", "f"]) -> str:
        """Get the current weather for a city."""
        calls.append(Weather(city=city, unit=unit))
        return f"22 degrees {unit} in {city}"

    tool = function_tool(get_weather) if strict else function_tool(strict_mode=False)(get_weather)
    agent = Agent(name="weather", instructions="Answer with the weather tool.", model=_model(compat_server),
                  tools=[tool], tool_use_behavior="stop_on_first_tool",
                  model_settings=ModelSettings(tool_choice="required", max_tokens=MAX_TOKENS, temperature=0))
    result = Runner.run_sync(agent, WEATHER_PROMPT)
    assert len(calls) == 1 and calls[0].city and calls[0].unit in ("c", "f")
    assert result.final_output == f"22 degrees {calls[0].unit} in {calls[0].city}"
    assert wire.last["tool_choice"] == "required"
    assert tool_schema(wire.last, "get_weather")["strict"] is strict
    # The arguments hold the declared keys only, and the call was not cut by max_tokens.
    response = json.loads(wire.exchanges[-1].body)
    (call,) = response["choices"][0]["message"]["tool_calls"]
    assert set(json.loads(call["function"]["arguments"])) == {"city", "unit"}
    assert response["choices"][0]["finish_reason"] != "length"
