"""pydantic-ai with ``OpenAIResponsesModel`` pointed at the server: tool output (the default for
a model ``output_type``) and ``NativeOutput`` (a strict ``text.format``)."""

from __future__ import annotations

import json

import pytest
from pydantic_ai import Agent, NativeOutput
from pydantic_ai.models.openai import OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.settings import ModelSettings

from .conftest import CITY_PROMPT, MAX_TOKENS, City, CompatServer, Wire

pytestmark = pytest.mark.model

SETTINGS = ModelSettings(max_tokens=MAX_TOKENS, temperature=0)


def _agent(server: CompatServer, output_type: object) -> Agent:
    model = OpenAIResponsesModel(server.model,
                                 provider=OpenAIProvider(base_url=server.base_url, api_key="unused"))
    return Agent(model, output_type=output_type, model_settings=SETTINGS)


def test_tool_output(compat_server: CompatServer, wire: Wire) -> None:
    result = _agent(compat_server, City).run_sync(CITY_PROMPT)
    assert isinstance(result.output, City) and result.output.name and result.output.country
    assert [e.path for e in wire.exchanges] == ["/v1/responses"]  # valid the first time: no retry
    assert wire.last["tool_choice"] == "required"
    (tool,) = wire.last["tools"]
    assert tool["type"] == "function" and tool["name"] == "final_result"
    # parallel_tool_calls is not sent, so the model may call final_result more than once;
    # pydantic-ai takes the first call.
    calls = json.loads(wire.exchanges[-1].body)["output"]
    assert calls and all(c["type"] == "function_call" and c["name"] == "final_result" for c in calls)
    assert City.model_validate_json(calls[0]["arguments"]) == result.output


def test_native_output(compat_server: CompatServer, wire: Wire) -> None:
    result = _agent(compat_server, NativeOutput(City)).run_sync(CITY_PROMPT)
    assert isinstance(result.output, City) and result.output.name and result.output.country
    assert [e.path for e in wire.exchanges] == ["/v1/responses"]
    fmt = wire.last["text"]["format"]
    assert fmt["type"] == "json_schema" and fmt["strict"] is True
    assert not wire.last.get("tools")
