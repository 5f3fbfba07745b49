"""The official ``anthropic`` SDK against ``POST /v1/messages`` on a live server: create and
stream, structured output (``output_config.format``, ``messages.parse``), a strict tool round
trip with ``tool_result``, ``count_tokens`` against the usage the message then reports, and
errors in Anthropic's shape.  Scripted model first (fast), then a few cases on the embedded
model (``model``), whose answers are checked against their schema whatever they say."""

from __future__ import annotations

import json

import anthropic
import httpx
import pytest
from pydantic import BaseModel

from afm_struct.testing import Script

from .conftest import wait_until

MODEL = "SmolLM2-135M-Instruct"
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
WEATHER = {"name": "get_weather", "description": "Current weather of a city", "strict": True,
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"], "additionalProperties": False}}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
USER = [{"role": "user", "content": "hi"}]


class Person(BaseModel):
    name: str
    age: int


def _sdk(url: str, **kwargs) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=120, **kwargs)


def _valid_person(value: object) -> None:
    assert isinstance(value, dict) and set(value) == {"name", "age"}, value
    assert isinstance(value["name"], str) and isinstance(value["age"], int), value


def test_create_and_stream(serve) -> None:
    client = _sdk(serve("Hello there, world!").url)
    message = client.messages.create(model="scripted", max_tokens=64, messages=USER,
                                     system=[{"type": "text", "text": "Be brief."}],
                                     metadata={"user_id": "u1"})
    assert message.type == "message" and message.role == "assistant" and message.model == "scripted"
    assert [b.type for b in message.content] == ["text"] and message.content[0].text == "Hello there, world!"
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0
    with client.messages.stream(model="scripted", max_tokens=64, messages=USER) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_start" in kinds and "content_block_stop" in kinds and "message_delta" in kinds
    assert final.content[0].text == "Hello there, world!" and final.stop_reason == "end_turn"
    assert final.usage.output_tokens == message.usage.output_tokens


def test_raw_stream_events_in_anthropic_order(serve) -> None:
    live = serve("Hello there, world!")
    with httpx.stream("POST", f"{live.url}/v1/messages?beta=true", timeout=60,
                      json={"model": "scripted", "max_tokens": 64, "messages": USER, "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    names = [line[len("event: "):] for line in lines if line.startswith("event: ")]
    data = [json.loads(line[len("data: "):]) for line in lines if line.startswith("data: ")]
    assert [d["type"] for d in data] == names  # every event: its name, then its data
    assert names[:2] == ["message_start", "ping"] and names[-2:] == ["message_delta", "message_stop"]
    assert names[2:-2] == ["content_block_start"] + ["content_block_delta"] * (len(names) - 6) + [
        "content_block_stop"]
    assert data[0]["message"]["content"] == [] and data[0]["message"]["stop_reason"] is None
    assert data[-2]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}


def test_stop_sequence_and_max_tokens(serve) -> None:
    client = _sdk(serve("one two three four five six").url)
    stopped = client.messages.create(model="scripted", max_tokens=64, messages=USER, stop_sequences=["four"])
    assert stopped.content[0].text == "one two three " and stopped.stop_reason == "stop_sequence"
    assert stopped.stop_sequence == "four"
    cut = client.messages.create(model="scripted", max_tokens=2, messages=USER)
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 2


@pytest.mark.parametrize("field", ["output_config", "output_format"])
def test_structured_output_streamed_and_not(serve, field) -> None:
    client = _sdk(serve('{"name": "Ada", "age": 36}').url)
    fmt = {"type": "json_schema", "schema": PERSON}
    extra = {"output_config": {"format": fmt}} if field == "output_config" else {"output_format": fmt}
    message = client.messages.create(model="scripted", max_tokens=64, messages=USER, extra_body=extra)
    _valid_person(json.loads(message.content[0].text))
    with client.messages.stream(model="scripted", max_tokens=64, messages=USER, extra_body=extra) as stream:
        text = "".join(stream.text_stream)
    _valid_person(json.loads(text))


def test_structured_output_is_enforced_not_ignored(serve) -> None:
    # The script writes prose: the mask lets through only a valid instance of the schema.
    client = _sdk(serve("I think her name is Ada").url)
    message = client.messages.create(model="scripted", max_tokens=200, messages=USER,
                                     output_config={"format": {"type": "json_schema", "schema": PERSON}})
    _valid_person(json.loads(message.content[0].text))


def test_messages_parse_with_a_pydantic_model(serve) -> None:
    client = _sdk(serve('{"name": "Ada", "age": 36}').url)
    parsed = client.messages.parse(model="scripted", max_tokens=64, messages=USER, output_format=Person)
    assert parsed.parsed_output == Person(name="Ada", age=36)


def test_strict_tool_round_trip_with_tool_result(serve) -> None:
    def script(prompt_ids: list[int]) -> str:
        # The second turn (after the tool result) answers in words.
        return "It is sunny in Paris." if len(prompt_ids) > turn_one[0] else CALL

    turn_one = [10**9]
    live = serve(Script(script))
    client = _sdk(live.url)
    first = client.messages.count_tokens(model="scripted", messages=USER, tools=[WEATHER])
    turn_one[0] = first.input_tokens
    message = client.messages.create(model="scripted", max_tokens=100, messages=USER, tools=[WEATHER],
                                     tool_choice={"type": "auto", "disable_parallel_tool_use": True})
    assert message.stop_reason == "tool_use"
    (call,) = message.content
    assert call.type == "tool_use" and call.name == "get_weather" and call.input == {"city": "Paris"}
    history = [*USER, {"role": "assistant", "content": [c.model_dump() for c in message.content]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                             "content": [{"type": "text", "text": "sunny, 21 C"}]}]}]
    answer = client.messages.create(model="scripted", max_tokens=100, messages=history, tools=[WEATHER])
    assert answer.stop_reason == "end_turn" and answer.content[0].text == "It is sunny in Paris."
    with client.messages.stream(model="scripted", max_tokens=100, messages=USER, tools=[WEATHER]) as stream:
        events = list(stream)
        final = stream.get_final_message()
    assert any(e.type == "input_json" for e in events)
    assert final.content[0].input == {"city": "Paris"} and final.stop_reason == "tool_use"


def test_tool_choice_any_forces_a_call(serve) -> None:
    client = _sdk(serve("I will not call anything.").url)
    message = client.messages.create(model="scripted", max_tokens=100, messages=USER, tools=[WEATHER],
                                     tool_choice={"type": "any"})
    # Off its script the stand-in writes arbitrary text, so the forced call's string argument
    # may run to the budget (then closed valid by the length closer): a call either way.
    assert message.stop_reason in ("tool_use", "max_tokens") and message.content[-1].type == "tool_use"
    assert message.content[-1].name == "get_weather" and set(message.content[-1].input) == {"city"}


def test_count_tokens_equals_the_input_tokens_used(serve) -> None:
    client = _sdk(serve("Hello there, world!").url)
    system = [{"type": "text", "text": "You are terse."}]
    for tools in ([], [WEATHER]):
        counted = client.messages.count_tokens(model="scripted", messages=USER, system=system, tools=tools)
        used = client.messages.create(model="scripted", max_tokens=20, messages=USER, system=system,
                                      tools=tools)
        assert counted.input_tokens == used.usage.input_tokens > 0
    assert client.messages.count_tokens(model="scripted", messages=USER, tools=[WEATHER]).input_tokens > \
        client.messages.count_tokens(model="scripted", messages=USER).input_tokens


def test_bad_input_gets_anthropics_error_shape(serve) -> None:
    live = serve()
    client = _sdk(live.url)
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    cases = [
        ({"max_tokens": 10, "messages": [{"role": "user", "content": [image]}]}, "messages.0.content.0"),
        ({"max_tokens": 10, "messages": USER, "tools": [{"name": "t", "input_schema": {"type": "string"}}]},
         "tools.0.input_schema"),
        ({"max_tokens": 10, "messages": USER, "surprise": 1}, "surprise"),
        ({"max_tokens": 10, "messages": USER, "output_config": {"format": {"type": "json_schema"}}},
         "output_config.format.schema"),
        ({"messages": USER}, "max_tokens"),
        ({"max_tokens": 10, "messages": USER, "temperature": 1.5}, "temperature"),
    ]
    for body, where in cases:
        r = httpx.post(f"{live.url}/v1/messages", json={"model": "scripted", **body})
        assert r.status_code == 400, (body, r.text)
        payload = r.json()
        assert payload["type"] == "error" and payload["error"]["type"] == "invalid_request_error", payload
        assert where in payload["error"]["message"], payload
    with pytest.raises(anthropic.BadRequestError) as err:
        client.messages.create(model="scripted", max_tokens=10,
                               messages=[{"role": "user", "content": [image]}])
    assert "text models" in err.value.message
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.create(model="claude-opus-4-8", max_tokens=10, messages=USER)
    assert missing.value.body["error"]["type"] == "not_found_error"
    # Other doors keep their own shapes.
    assert "error" in httpx.post(f"{live.url}/v1/chat/completions", json={"messages": []}).json()


def test_api_key_as_x_api_key_or_bearer(serve) -> None:
    live = serve(api_keys=("sk-one",))
    ok = _sdk(live.url).with_options(api_key="sk-one").messages.create(
        model="scripted", max_tokens=8, messages=USER)
    assert ok.stop_reason in ("end_turn", "max_tokens")
    bearer = anthropic.Anthropic(base_url=live.url, auth_token="sk-one", max_retries=0)
    assert bearer.messages.create(model="scripted", max_tokens=8, messages=USER).content
    with pytest.raises(anthropic.AuthenticationError) as err:
        _sdk(live.url).with_options(api_key="sk-wrong").messages.create(model="scripted", max_tokens=8,
                                                                         messages=USER)
    assert err.value.body["error"]["type"] == "authentication_error"


def test_model_alias_reaches_the_served_model(serve) -> None:
    from server.model_alias import parse_aliases

    live = serve(model_aliases=parse_aliases(["claude-*=scripted"]))
    message = _sdk(live.url).messages.create(model="claude-opus-4-8", max_tokens=8, messages=USER)
    assert message.model == "scripted"
    r = httpx.post(f"{live.url}/v1/chat/completions", json={"model": "claude-haiku", "messages": USER,
                                                            "max_tokens": 4})
    assert r.status_code == 200 and r.json()["model"] == "scripted"
    assert httpx.post(f"{live.url}/v1/messages", json={"model": "gpt-4o", "max_tokens": 4,
                                                       "messages": USER}).status_code == 404


def test_cancel_by_request_id(serve) -> None:
    live = serve(Script("word " * 400, delay_s=0.02))
    with httpx.stream("POST", f"{live.url}/v1/messages", headers={"X-Request-ID": "msg-cancel-1"}, timeout=60,
                      json={"model": "scripted", "max_tokens": 400, "messages": USER, "stream": True}) as r:
        lines = r.iter_lines()
        assert next(lines) == "event: message_start"
        cancel = f"{live.url}/v1/messages/msg-cancel-1/cancel"
        assert wait_until(lambda: httpx.post(cancel).status_code == 200)
        data = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
    assert data[-2]["delta"]["stop_reason"] == "cancelled" and data[-1]["type"] == "message_stop"
    gone = httpx.post(f"{live.url}/v1/messages/msg-cancel-1/cancel")
    assert gone.status_code == 404 and gone.json()["error"]["type"] == "not_found_error"


@pytest.mark.model
def test_real_model_structured_output_valid_in_every_case(real_server) -> None:
    client = _sdk(real_server.url)
    fmt = {"format": {"type": "json_schema", "schema": PERSON}}
    prompts = ["Extract: Ada Lovelace, 36.", "Who is Alan Turing? Answer as JSON.", "hi"]
    for prompt in prompts:
        messages = [{"role": "user", "content": prompt}]
        message = client.messages.create(model=MODEL, max_tokens=80, messages=messages,
                                         extra_body={"temperature": 0}, output_config=fmt)
        _valid_person(json.loads(message.content[0].text))
        with client.messages.stream(model=MODEL, max_tokens=80, messages=messages,
                                    extra_body={"temperature": 0.7}, output_config=fmt) as stream:
            _valid_person(json.loads("".join(stream.text_stream)))
    parsed = client.messages.parse(model=MODEL, max_tokens=80,
                                   messages=[{"role": "user", "content": prompts[0]}],
                                   output_format=Person)
    assert isinstance(parsed.parsed_output, Person)


@pytest.mark.model
def test_real_model_strict_tool_input_valid_and_count_tokens(real_server) -> None:
    client = _sdk(real_server.url)
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    choice = {"type": "tool", "name": "get_weather"}
    # The count takes the same tool_choice: a forced call changes the prompt's tool instructions.
    counted = client.messages.count_tokens(model=MODEL, messages=messages, tools=[WEATHER],
                                           tool_choice=choice)
    message = client.messages.create(model=MODEL, max_tokens=60, messages=messages, tools=[WEATHER],
                                     tool_choice=choice, extra_body={"temperature": 0})
    assert message.usage.input_tokens == counted.input_tokens
    calls = [b for b in message.content if b.type == "tool_use"]
    assert calls and message.stop_reason == "tool_use"
    assert set(calls[0].input) == {"city"} and isinstance(calls[0].input["city"], str)
