"""openai-agents with its default model, the Responses API (``OpenAIResponsesModel``), on the
default AsyncOpenAI client pointed at the server, as a new user would set it up: a structured
``output_type`` over two turns (``previous_response_id``), and a ``function_tool`` strict and
not, forced by ``tool_choice="required"``, the strict run's items then passed back as the next
turn's input."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Literal

import openai
import pytest
from agents import (
    Agent,
    ModelSettings,
    Runner,
    function_tool,
    set_default_openai_client,
    set_tracing_disabled,
)

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

set_tracing_disabled(True)  # no trace export (it would try to reach OpenAI)


@pytest.fixture
def default_client(compat_server: CompatServer) -> Iterator[None]:
    """The SDK's default client pointed at the server, set as a new user would (a fresh one per
    test, so no test depends on another's connections)."""
    set_default_openai_client(openai.AsyncOpenAI(base_url=compat_server.base_url, api_key="unused",
                                                 max_retries=0, timeout=120), use_for_tracing=False)
    yield


def test_output_type_over_two_turns(compat_server: CompatServer, wire: Wire, default_client: None) -> None:
    """A plain model name: the SDK calls POST /v1/responses with the output type as a strict
    ``text.format``; the second turn continues the first through ``previous_response_id``."""
    agent = Agent(name="extractor", instructions="Extract the city.", model=compat_server.model,
                  output_type=City, model_settings=ModelSettings(max_tokens=MAX_TOKENS, temperature=0))
    first = Runner.run_sync(agent, CITY_PROMPT)
    assert isinstance(first.final_output, City) and first.final_output.name
    second = Runner.run_sync(agent, "And the same city once more.",
                             previous_response_id=first.last_response_id)
    assert isinstance(second.final_output, City) and second.final_output.name
    assert [e.path for e in wire.exchanges] == ["/v1/responses", "/v1/responses"]
    fmt = wire.requests[0]["text"]["format"]
    assert fmt["type"] == "json_schema" and fmt["strict"] is True
    assert wire.requests[1]["previous_response_id"] == first.last_response_id
    answers = [json.loads(e.body) for e in wire.exchanges]
    assert answers[1]["previous_response_id"] == answers[0]["id"] == first.last_response_id
    # The second prompt holds the first turn: its input counts the first's input and output.
    used = [a["usage"] for a in answers]
    assert used[1]["input_tokens"] > used[0]["input_tokens"] + used[0]["output_tokens"]


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "strict_mode_false"])
def test_function_tool_required(compat_server: CompatServer, wire: Wire, default_client: None,
                                strict: bool) -> None:
    """``function_tool`` under ``tool_choice="required"``: the tool runs once with validated
    arguments, strict (the default) or not (``strict_mode=False``); either way the arguments
    follow the schema and the call was not cut."""
    calls: list[Weather] = []

    def get_weather(city: str, unit: Literal["c", "f"]) -> str:
        """Get the current weather for a city."""
        calls.append(Weather(city=city, unit=unit))
        return f"22 degrees {unit} in {city}"

    tool = function_tool(get_weather) if strict else function_tool(strict_mode=False)(get_weather)
    agent = Agent(name="weather", instructions="Answer with the weather tool.", model=compat_server.model,
                  tools=[tool], tool_use_behavior="stop_on_first_tool",
                  model_settings=ModelSettings(tool_choice="required", max_tokens=MAX_TOKENS, temperature=0))
    result = Runner.run_sync(agent, WEATHER_PROMPT)
    assert len(calls) == 1 and calls[0].city and calls[0].unit in ("c", "f")
    assert result.final_output == f"22 degrees {calls[0].unit} in {calls[0].city}"
    assert [e.path for e in wire.exchanges] == ["/v1/responses"]
    assert wire.last["tool_choice"] == "required"
    assert response_tool(wire.last, "get_weather")["strict"] is strict
    response = json.loads(wire.exchanges[-1].body)
    assert response["status"] == "completed"
    (call,) = [item for item in response["output"] if item["type"] == "function_call"]
    assert set(json.loads(call["arguments"])) == {"city", "unit"}
    if strict:
        _items_passed_back(compat_server, wire, result.to_input_list(), call)


def _items_passed_back(server: CompatServer, wire: Wire, history: list, call: dict) -> None:
    """The other way to a second turn: the run's items sent back as input (the call and its
    output), which the server reads into the conversation."""
    agent = Agent(name="reply", instructions="Answer in a few words.", model=server.model,
                  model_settings=ModelSettings(max_tokens=8, temperature=0))
    reply = Runner.run_sync(agent, [*history, {"role": "user", "content": "Thanks."}])
    assert isinstance(reply.final_output, str)
    sent = wire.last["input"]
    kinds = [item.get("type", "message") for item in sent]
    assert kinds == ["message", "function_call", "function_call_output", "message"], kinds
    assert sent[1]["call_id"] == sent[2]["call_id"] == call["call_id"]
    assert "previous_response_id" not in wire.last
