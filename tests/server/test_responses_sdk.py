"""The official openai SDK's Responses helpers against the server: ``responses.create``
(streamed and not), ``responses.parse`` and ``responses.stream`` with a pydantic model and
with a function tool; scripted first (fast), then a few on the embedded model (``model``)."""

from __future__ import annotations

import json

import openai
import pytest
from pydantic import BaseModel

MODEL = "SmolLM2-135M-Instruct"


class Person(BaseModel):
    name: str
    age: int


WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather of a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"], "additionalProperties": False}, "strict": True}


def _sdk(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


def _served(client: openai.OpenAI) -> str:
    return client.models.list().data[0].id


def test_create_streamed_and_not(serve) -> None:
    client = _sdk(serve("Hello there, world!").url)
    response = client.responses.create(input="hi", metadata={"k": "v"})
    assert response.output_text == "Hello there, world!" and response.metadata == {"k": "v"}
    events = list(client.responses.create(input="hi", stream=True))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Hello there, world!"
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_parse_with_a_pydantic_model(serve) -> None:
    client = _sdk(serve('{"name": "Ada", "age": 36}').url)
    parsed = client.responses.parse(input="Ada is 36.", text_format=Person)
    assert parsed.output_parsed == Person(name="Ada", age=36)


def test_stream_helper_with_a_pydantic_model(serve) -> None:
    client = _sdk(serve('{"name": "Ada", "age": 36}').url)
    with client.responses.stream(model=_served(client), input="Ada is 36.", text_format=Person) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert final.output_parsed == Person(name="Ada", age=36)
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"


def test_stream_helper_with_a_function_tool(serve) -> None:
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    client = _sdk(serve(call).url)
    with client.responses.stream(model=_served(client), input="Weather in Paris?", tools=[WEATHER]) as stream:
        done = [e for e in stream if e.type == "response.function_call_arguments.done"]
        final = stream.get_final_response()
    assert len(done) == 1 and json.loads(done[0].arguments) == {"city": "Paris"}
    (call,) = final.output
    assert call.type == "function_call" and call.name == "get_weather"


@pytest.mark.model
def test_real_model_parse_and_stream_with_a_pydantic_model(real_server) -> None:
    client = _sdk(real_server.url)
    parsed = client.responses.parse(model=MODEL, input="Extract: Ada Lovelace, 36.", text_format=Person,
                                    temperature=0, max_output_tokens=60)
    assert isinstance(parsed.output_parsed, Person)
    with client.responses.stream(model=MODEL, input="Extract: Ada Lovelace, 36.", text_format=Person,
                                 temperature=0, max_output_tokens=60) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert isinstance(final.output_parsed, Person) and "".join(deltas) == final.output_text


@pytest.mark.model
def test_real_model_stream_with_a_function_tool(real_server) -> None:
    client = _sdk(real_server.url)
    with client.responses.stream(model=MODEL, input="What is the weather in Paris?", tools=[WEATHER],
                                 tool_choice="required", parallel_tool_calls=False, temperature=0,
                                 max_output_tokens=80) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    calls = [item for item in final.output if item.type == "function_call"]
    assert calls and all(c.name == "get_weather" and isinstance(json.loads(c.arguments)["city"], str)
                         for c in calls)
    assert "response.function_call_arguments.done" in kinds and kinds[-1] == "response.completed"
