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


SQL = r'''
start: "SELECT " cols " FROM " NAME where?
cols: NAME (", " NAME)* | "*"
where: " WHERE " NAME " = " VALUE
NAME: /[a-z_]+/
VALUE: /"[^"\n]*"/ | /[0-9]+/
'''
SQL_TOOL = {"type": "custom", "name": "run_sql", "description": "Run a query",
            "format": {"type": "grammar", "syntax": "lark", "definition": SQL}}


def _sql_call(query: str) -> str:
    return '<tool_call>\n{"name": "run_sql", "arguments": ' + json.dumps({"input": query}) + "}\n</tool_call>"


def test_a_custom_tool_with_a_lark_grammar_streams_its_raw_input(serve) -> None:
    """The grammar constrains the raw input (here with quotes, escaped inside the call's JSON);
    the SDK reads custom_tool_call items and the input's delta/done events."""
    query = 'SELECT name, age FROM people WHERE city = "Paris"'
    client = _sdk(serve(_sql_call(query)).url)
    events = list(client.responses.create(input="q", tools=[SQL_TOOL], tool_choice="required", stream=True))
    deltas = "".join(e.delta for e in events if e.type == "response.custom_tool_call_input.delta")
    (done,) = [e for e in events if e.type == "response.custom_tool_call_input.done"]
    final = events[-1].response
    (item,) = final.output
    assert item.type == "custom_tool_call" and item.name == "run_sql"
    assert item.input == deltas == done.input == query
    again = client.responses.create(input="q", tools=[SQL_TOOL], tool_choice="required")
    assert again.output[0].type == "custom_tool_call" and again.output[0].input == query


def test_a_lark_grammar_keeps_the_input_in_its_language(serve) -> None:
    """The script writes lowercase SQL and a value with a newline; the grammar allows neither."""
    client = _sdk(serve(_sql_call('select * from t where a = "x\ny"')).url)
    response = client.responses.create(input="q", tools=[SQL_TOOL], tool_choice="required",
                                       max_output_tokens=80)
    (item,) = response.output
    assert item.type == "custom_tool_call"
    assert item.input.startswith("SELECT ") and "\n" not in item.input, item.input


def test_a_lark_grammar_using_what_is_not_supported_is_a_400_naming_it(serve) -> None:
    client = _sdk(serve("unused").url)
    tool = {**SQL_TOOL, "format": {"type": "grammar", "syntax": "lark",
                                   "definition": "%import common.WS\nstart: \"a\""}}
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(input="q", tools=[tool])
    error = refused.value.body
    assert error["param"] == "tools.0.format.definition" and "directives" in error["message"], error
