"""Agent frameworks that send tools and a response format on every turn (issue 49.1), against the
embedded model: the OpenAI Agents SDK with an ``output_type`` and function tools, pydantic-ai
with ``NativeOutput`` and tools.  Whatever the 135M model decides, every turn must be either
valid tool calls or a final output valid against the format, with ``X-AFM-Constraint-Mode:
exact`` (one grammar holds both branches).  Checked on the wire, turn by turn.

The prompts are not tuned to the model; one per framework by default,
``AFM_STRUCT_RANDOM_EXAMPLES`` > 1 runs them all."""

from __future__ import annotations

import json
import os

import jsonschema
import openai
import pytest
from agents import (
    Agent,
    MaxTurnsExceeded,
    ModelSettings,
    OpenAIChatCompletionsModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import NativeOutput, UsageLimitExceeded
from pydantic_ai.exceptions import UnexpectedModelBehavior
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.settings import ModelSettings as PydanticSettings
from pydantic_ai.usage import UsageLimits

from .conftest import MAX_TOKENS, City, CompatServer, Wire

pytestmark = pytest.mark.model

set_tracing_disabled(True)

PROMPTS = [
    "Paris is the capital of France. Extract the city and its country.",
    "I am flying to Osaka next week. Which city and country is that? Look up its population first.",
    "Tell me the population of Lagos, then give the city and country.",
    "Where is the Eiffel Tower?",
]
# Plain chat requests: the 135M model answers some of these in the format and calls on others
# (greedy, measured: 2 of 6 answered); either way the turn must be valid.
RAW_PROMPTS = ["Extract the city and country: Rome, Italy.", "Return JSON for Berlin.",
               "Which country is Tokyo in?", "Name a city in Spain.", "Lima is in Peru.", PROMPTS[0]]
FULL = int(os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES", "0") or 0) > 1
COUNT = len(PROMPTS) if FULL else 1


def population(city: str) -> str:
    """Look up the population of a city."""
    return f"{city} has about 2 million inhabitants."


def every_turn_valid(wire: Wire) -> list[str]:
    """Assert each recorded turn is valid calls or a valid answer; the kinds, in order."""
    kinds = []
    assert wire.exchanges
    for exchange in wire.exchanges:
        assert exchange.status == 200, exchange.render()
        assert exchange.headers.get("x-afm-constraint-mode") == "exact", exchange.render()
        request = exchange.request
        message = json.loads(exchange.body)["choices"][0]["message"]
        schemas = {t["function"]["name"]: t["function"]["parameters"] for t in request["tools"]}
        if message.get("tool_calls"):
            for call in message["tool_calls"]:
                name = call["function"]["name"]
                assert name in schemas, exchange.render()
                jsonschema.validate(json.loads(call["function"]["arguments"]), schemas[name])
            kinds.append("calls")
        else:
            answer_schema = request["response_format"]["json_schema"]["schema"]
            jsonschema.validate(json.loads(message["content"]), answer_schema)
            kinds.append("answer")
    print("turns:", kinds)  # shown with -s: how the model chose
    return kinds


@pytest.mark.parametrize("prompt", PROMPTS[:COUNT])
def test_agents_sdk_output_type_with_tools(compat_server: CompatServer, wire: Wire, prompt: str) -> None:
    client = openai.AsyncOpenAI(base_url=compat_server.base_url, api_key="unused", max_retries=0, timeout=120)
    agent = Agent(name="geo", instructions="Answer with the city and its country. Use tools when useful.",
                  model=OpenAIChatCompletionsModel(model=compat_server.model, openai_client=client),
                  tools=[function_tool(population)], output_type=City,
                  model_settings=ModelSettings(max_tokens=MAX_TOKENS, temperature=0))
    try:
        result = Runner.run_sync(agent, prompt, max_turns=2)
    except MaxTurnsExceeded:  # the model kept calling: every turn must still be valid
        result = None
    kinds = every_turn_valid(wire)
    assert "tools" in wire.last and wire.last["response_format"]["type"] == "json_schema"
    if result is not None:
        assert isinstance(result.final_output, City) and kinds[-1] == "answer"


@pytest.mark.parametrize("prompt", PROMPTS[:COUNT])
def test_pydantic_ai_native_output_with_tools(compat_server: CompatServer, wire: Wire, prompt: str) -> None:
    model = OpenAIChatModel(compat_server.model,
                            provider=OpenAIProvider(base_url=compat_server.base_url, api_key="unused"))
    agent = PydanticAgent(model, output_type=NativeOutput(City), tools=[population],
                          model_settings=PydanticSettings(max_tokens=MAX_TOKENS, temperature=0))
    try:
        result = agent.run_sync(prompt, usage_limits=UsageLimits(request_limit=2 if FULL else 1))
    except (UsageLimitExceeded, UnexpectedModelBehavior):  # kept calling: every turn still valid
        result = None
    kinds = every_turn_valid(wire)
    assert "tools" in wire.last and wire.last["response_format"]["type"] == "json_schema"
    if result is not None:
        assert isinstance(result.output, City) and kinds[-1] == "answer"


@pytest.mark.parametrize("prompt", RAW_PROMPTS if FULL else RAW_PROMPTS[:1])
def test_openai_sdk_tools_and_response_format(compat_server: CompatServer, wire: Wire, prompt: str) -> None:
    """The openai SDK's own request (tools, a strict ``response_format``, ``tool_choice`` auto)."""
    client = openai.OpenAI(base_url=compat_server.base_url, api_key="unused", max_retries=0, timeout=120)
    tool = {"type": "function", "function": {"name": "population", "description": population.__doc__,
                                             "strict": True, "parameters": {
                                                 "type": "object", "properties": {"city": {"type": "string"}},
                                                 "required": ["city"], "additionalProperties": False}}}
    schema = City.model_json_schema() | {"additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "City", "strict": True, "schema": schema}}
    client.chat.completions.create(model=compat_server.model, messages=[{"role": "user", "content": prompt}],
                                   tools=[tool], response_format=fmt, max_tokens=MAX_TOKENS, temperature=0)
    every_turn_valid(wire)
