"""Tools end to end over HTTP: the official openai SDK and the client assembler against the server.

Skipped only if the server does not call :func:`afm_struct.tools.plan_tools` (a build without the
tools wiring).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import jsonschema
import openai
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

from afm_struct.client import Client, StreamAssembler
from afm_struct.testing import scripted_loaded_model
from server.live import LiveServer, start_server
from server.settings import ServerSettings

from .conftest import TIME, WEATHER

MODEL = "SmolLM2-135M-Instruct"
USER = [{"role": "user", "content": "What is the weather in Paris right now?"}]
PARAMS = WEATHER["function"]["parameters"]


def _sdk(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def live(embedded) -> Iterator[LiveServer]:
    server = start_server(embedded)
    yield server
    server.stop()


@pytest.mark.model
def test_sdk_streaming_required_call_validates(live) -> None:
    stream = _sdk(live.url).chat.completions.create(
        model=MODEL, messages=USER, tools=[WEATHER], tool_choice="required", stream=True,
        parallel_tool_calls=False, max_tokens=48, temperature=0)
    chunks = [c for c in stream if c.choices]
    frags = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or ())]
    first = frags[0]
    assert first.id.startswith("call_") and first.type == "function"
    assert first.function.name == "get_weather"
    args = "".join(f.function.arguments or "" for f in frags if f.index == 0)
    jsonschema.validate(json.loads(args), PARAMS)
    assert len(frags) > 2  # arguments arrive as fragments
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


@pytest.mark.model
def test_sdk_non_streaming_named_function(live) -> None:
    resp = _sdk(live.url).chat.completions.create(
        model=MODEL, messages=USER, tools=[WEATHER, TIME], max_tokens=48, temperature=0,
        parallel_tool_calls=False, tool_choice={"type": "function", "function": {"name": "get_weather"}})
    calls = resp.choices[0].message.tool_calls
    assert resp.choices[0].finish_reason == "tool_calls" and calls[0].function.name == "get_weather"
    jsonschema.validate(json.loads(calls[0].function.arguments), PARAMS)


@pytest.mark.model
def test_sdk_parallel_false_exactly_one_call(live) -> None:
    resp = _sdk(live.url).chat.completions.create(
        model=MODEL, messages=USER, tools=[WEATHER, TIME], tool_choice="required",
        parallel_tool_calls=False, max_tokens=64, temperature=0)
    assert len(resp.choices[0].message.tool_calls) == 1


@pytest.mark.model
def test_sdk_multi_turn_loop(live) -> None:
    client = _sdk(live.url)
    first = client.chat.completions.create(model=MODEL, messages=USER, tools=[WEATHER],
                                           tool_choice="required", parallel_tool_calls=False,
                                           max_tokens=48, temperature=0)
    call = first.choices[0].message.tool_calls[0]
    history = [*USER, first.choices[0].message.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": call.id, "content": '{"temp_c": 21, "sky": "clear"}'}]
    final = client.chat.completions.create(model=MODEL, messages=history, tools=[WEATHER],
                                           tool_choice="none", max_tokens=24, temperature=0)
    assert final.choices[0].message.content and not final.choices[0].message.tool_calls
    assert final.choices[0].finish_reason in ("stop", "length")


@pytest.mark.model
def test_client_assembler_and_sdk_agree_over_http(live) -> None:
    kwargs = {"model": MODEL, "tools": [WEATHER, TIME], "tool_choice": "required",
              "max_tokens": 64, "temperature": 0}
    sdk_stream = _sdk(live.url).chat.completions.stream(messages=USER, **kwargs)
    with sdk_stream as s:
        sdk_final = s.get_final_completion()
    with Client(live.url) as client:
        ours = client.chat(USER, stream=True, **kwargs)
    sdk_calls = [(c.function.name, c.function.arguments) for c in sdk_final.choices[0].message.tool_calls]
    assert [(c.name, c.arguments) for c in ours.tool_calls] == sdk_calls


def test_unenforceable_strict_tool_sets_the_downgraded_header(tokenizer) -> None:
    odd = {"type": "function", "function": {"name": "odd", "strict": True, "parameters": {
        "type": "object", "properties": {"a": {"oneOf": [{"type": "integer"},
                                                         {"type": "number", "multipleOf": 0.5}]}}}}}
    script = '<tool_call>\n{"name": "odd", "arguments": {"a": 1}}\n</tool_call>'
    loaded = scripted_loaded_model(tokenizer, script)
    server = start_server(loaded)
    try:
        raw = _sdk(server.url).chat.completions.with_raw_response.create(
            model="scripted", messages=USER, tools=[odd], tool_choice="required", max_tokens=40)
        assert raw.headers["x-grammar-constraints"] == "downgraded"
        assert raw.parse().choices[0].message.tool_calls[0].function.name == "odd"
    finally:
        server.stop()


SCRIPTED_TURN = ("<think>The user wants the weather.</think>\nChecking.\n<tool_call>\n"
                 '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>')


def test_reasoning_content_and_a_call_over_sse(tokenizer) -> None:
    """Scripted: thinking, then text, then a strict call (auto: lazy grammar) over real SSE."""
    server = start_server(scripted_loaded_model(tokenizer, SCRIPTED_TURN), ServerSettings(reasoning="think"))
    try:
        body = {"messages": USER, "tools": [WEATHER, TIME], "stream": True, "max_tokens": 120}
        with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=60) as r:
            assert r.status_code == 200
            payloads = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
        assembler, state = StreamAssembler(), ChatCompletionStreamState()
        for p in payloads:
            assembler.feed_data(p)
            if p != "[DONE]":
                chunk = json.loads(p)
                if chunk.get("choices"):
                    state.handle_chunk(ChatCompletionChunk.model_validate(chunk))
        ours = assembler.close()
        sdk = state.get_final_completion().choices[0]
        assert ours.reasoning_content == "The user wants the weather." and ours.content == "Checking."
        assert ours.finish_reason == sdk.finish_reason == "tool_calls"
        assert [(c.name, c.arguments) for c in ours.tool_calls] == [
            (c.function.name, c.function.arguments) for c in sdk.message.tool_calls]
        jsonschema.validate(json.loads(ours.tool_calls[0].arguments), PARAMS)
        plain = _sdk(server.url).chat.completions.create(model="scripted", messages=USER,
                                                         tools=[WEATHER, TIME], max_tokens=120)
        msg = plain.choices[0].message
        assert plain.choices[0].finish_reason == "tool_calls" and msg.content == "Checking."
        assert msg.tool_calls[0].function.arguments == ours.tool_calls[0].arguments
    finally:
        server.stop()


@pytest.mark.parametrize("stop", ["Paris", "}", "celsius"])
def test_stop_strings_end_content_not_a_tool_call(tokenizer, stop) -> None:
    """A stop sequence that occurs inside a strict call's arguments leaves the call whole (it
    cut them into invalid JSON reported as a finished call); in the content it still ends the
    turn."""
    server = start_server(scripted_loaded_model(tokenizer, SCRIPTED_TURN), ServerSettings(reasoning="think"))
    try:
        client = Client(server.url)
        result = client.chat(USER, tools=[WEATHER, TIME], max_tokens=120, stop=[stop])
        assert result.finish_reason == "tool_calls" and result.content == "Checking."
        assert json.loads(result.tool_calls[0].arguments) == {"city": "Paris", "unit": "celsius"}
        cut = client.chat(USER, tools=[WEATHER, TIME], max_tokens=120, stop=["ecking"])
        assert cut.finish_reason == "stop" and cut.content == "Ch" and not cut.tool_calls
    finally:
        server.stop()


def test_overlapping_stops_held_when_a_call_begins_still_cut_the_content(tokenizer) -> None:
    """Stops ``ng.`` and ``ing.\n<tool_call>ZZ``: the longer one starts first, so the scanner
    holds ``ing.\n<tool_call>`` until the call's forced tokens turn stops off; the held ``ng.``
    then ends the turn (as the old matcher did at once), and no call text leaks into content."""
    server = start_server(scripted_loaded_model(tokenizer, SCRIPTED_TURN), ServerSettings(reasoning="think"))
    try:
        result = Client(server.url).chat(USER, tools=[WEATHER, TIME], max_tokens=120,
                                         stop=["ng.", "ing.\n<tool_call>ZZ"])
        assert result.finish_reason == "stop" and result.content == "Checki" and not result.tool_calls
    finally:
        server.stop()


@pytest.mark.model
def test_stop_string_inside_arguments_on_the_real_model(live) -> None:
    """The soak's finding: stop ["Paris"] with a required strict call gave ``{"city": ""}`` and
    finish_reason tool_calls."""
    completion = _sdk(live.url).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "What is the weather in Paris, in celsius?"}],
        tools=[WEATHER], tool_choice="required", parallel_tool_calls=False, max_tokens=64,
        temperature=0, stop=["Paris"])
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    jsonschema.validate(json.loads(choice.message.tool_calls[0].function.arguments), PARAMS)


# What the OpenAI Agents SDK sends for `get_weather(city, unit)`: a closed, all-required schema,
# and no "strict" key.  Before schema-guided arguments the model wrote
# {"temperature": ["Temperature", "Celsius"]} here.
AGENTS_WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "unit": {"type": "string", "enum": ["c", "f"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}


@pytest.mark.model
@pytest.mark.parametrize("stream", [False, True])
def test_non_strict_tool_arguments_follow_the_schema(live, stream) -> None:
    kwargs = {"model": MODEL, "messages": USER, "tools": [AGENTS_WEATHER], "tool_choice": "required",
              "parallel_tool_calls": False, "max_tokens": 48, "temperature": 0}
    if stream:
        with _sdk(live.url).chat.completions.stream(**kwargs) as s:
            final = s.get_final_completion()
        resp_headers = None
    else:
        raw = _sdk(live.url).chat.completions.with_raw_response.create(**kwargs)
        final, resp_headers = raw.parse(), raw.headers
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, AGENTS_WEATHER["function"]["parameters"])
    if resp_headers is not None:  # non-strict: never reported downgraded
        assert "x-grammar-constraints" not in resp_headers
