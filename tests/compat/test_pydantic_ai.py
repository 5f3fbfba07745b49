"""pydantic-ai with its OpenAI chat model pointed at the server: tool output (the default for a
model ``output_type``), ``NativeOutput`` (response_format json_schema) and ``run_stream``."""

from __future__ import annotations

import asyncio

import pytest
from pydantic_ai import Agent, NativeOutput
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.settings import ModelSettings

from .conftest import CITY_PROMPT, MAX_TOKENS, City, CompatServer, Wire

pytestmark = pytest.mark.model

SETTINGS = ModelSettings(max_tokens=MAX_TOKENS, temperature=0)


def _agent(server: CompatServer, output_type: object) -> Agent:
    model = OpenAIChatModel(server.model, provider=OpenAIProvider(base_url=server.base_url, api_key="unused"))
    return Agent(model, output_type=output_type, model_settings=SETTINGS)


def _output_tool(request: dict) -> dict:
    (tool,) = request["tools"]
    return tool["function"]


def test_tool_output(compat_server: CompatServer, wire: Wire) -> None:
    result = _agent(compat_server, City).run_sync(CITY_PROMPT)
    assert isinstance(result.output, City) and result.output.name and result.output.country
    assert len(wire.requests) == 1  # valid the first time: no retry prompt
    assert wire.last["tool_choice"] == "required"
    assert _output_tool(wire.last)["name"] == "final_result"


def test_native_output(compat_server: CompatServer, wire: Wire) -> None:
    result = _agent(compat_server, NativeOutput(City)).run_sync(CITY_PROMPT)
    assert isinstance(result.output, City) and result.output.name and result.output.country
    assert len(wire.requests) == 1
    fmt = wire.last["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
    assert "tools" not in wire.last


def test_run_stream(compat_server: CompatServer, wire: Wire) -> None:
    agent = _agent(compat_server, City)

    async def run() -> tuple[list[City], City]:
        outputs: list[City] = []
        async with agent.run_stream(CITY_PROMPT) as result:
            async for partial in result.stream_output(debounce_by=None):
                outputs.append(partial)
            return outputs, await result.get_output()

    outputs, final = asyncio.run(run())
    assert isinstance(final, City) and final.name and final.country
    assert len(outputs) >= 2  # partial outputs as the tool arguments stream
    assert all(isinstance(o, City) for o in outputs) and outputs[-1] == final
    assert len(wire.requests) == 1 and wire.last["stream"] is True
