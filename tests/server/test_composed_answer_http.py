"""Tools and a JSON output format in one grammar over real HTTP, on all three doors (issue 49.1).

One scripted server for the module: the model calls the tool when the prompt says ``CALL``,
writes an answer off the schema when it says ``OFF`` (greedy, the mask bends it into the schema:
without the composed grammar the tool grammar owned the mask and this answer went out invalid),
else a valid answer.  Chat (``response_format``), Responses (``text.format``) and Messages
(``output_config.format``) each get the answer as their content (validated) and the call as a
call; ``X-AFM-Constraint-Mode`` says ``exact``.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import jsonschema
import openai
import pytest

from afm_struct.testing import Script

from .conftest import decode, stream_raw

ANSWER = {"type": "object", "properties": {"q": {"type": "string", "maxLength": 5}, "n": {"type": "integer"}},
          "required": ["q", "n"], "additionalProperties": False}
CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"],
        "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "strict": True, "parameters": CITY}}]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
VALID = '{"q": "abc", "n": 7}'
OFF = '{"q": "far too long for five", "n": "seven", "extra": true}'
FORMAT = {"type": "json_schema", "json_schema": {"name": "a", "schema": ANSWER, "strict": True}}


def say(prompt: str) -> str:
    if "CALL" in prompt:
        return CALL
    return OFF if "OFF" in prompt else VALID


@pytest.fixture(scope="module")
def live(tokenizer):
    from afm_struct.testing import scripted_loaded_model
    from server.live import start_server

    server = start_server(scripted_loaded_model(tokenizer, Script(lambda ids: say(tokenizer.decode(ids)))))
    yield server
    server.stop()


Calls = list[dict[str, Any]]


def chat(url: str, body: dict[str, Any], stream: bool) -> tuple[httpx.Response, str, Calls, str]:
    """(response, content, tool calls as {name, arguments}, finish_reason), streamed or not."""
    if not stream:
        r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        calls = [c["function"] for c in choice["message"].get("tool_calls") or []]
        return r, choice["message"]["content"] or "", calls, choice["finish_reason"]
    r, payloads = stream_raw(url, body)
    assert r.status_code == 200, r.text
    content, calls, finish = "", {}, None
    for chunk in decode(payloads):
        for choice in chunk["choices"]:
            delta = choice["delta"]
            content += delta.get("content") or ""
            for tc in delta.get("tool_calls") or []:
                slot = calls.setdefault(tc["index"], {"name": "", "arguments": ""})
                slot["name"] += tc.get("function", {}).get("name") or ""
                slot["arguments"] += tc.get("function", {}).get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    return r, content, [calls[i] for i in sorted(calls)], finish


@pytest.mark.parametrize("say_, stream", [("answer", False), ("OFF", False), ("OFF", True), ("CALL", False),
                                           ("CALL", True)])
def test_chat_answers_in_the_format_or_calls(live, stream, say_) -> None:
    body = {"messages": [{"role": "user", "content": say_}], "tools": TOOLS, "response_format": FORMAT,
            "max_tokens": 60, "temperature": 0}
    r, content, calls, finish = chat(live.url, body, stream)
    assert r.headers["x-afm-constraint-mode"] == "exact" and "x-grammar-constraints" not in r.headers
    if say_ == "CALL":
        assert (content, finish) == ("", "tool_calls")
        assert [c["name"] for c in calls] == ["get_weather"]
        jsonschema.validate(json.loads(calls[0]["arguments"]), CITY)
        return
    assert calls == [] and finish == "stop"
    jsonschema.validate(json.loads(content), ANSWER)
    if say_ == "answer":
        assert content == VALID


@pytest.mark.parametrize("choice, mode", [
    ("none", "exact"),  # the answer alone, as a plain json_schema request
    ("required", "exact"),  # the calls alone: no answer can be written
    ({"type": "function", "function": {"name": "get_weather"}}, "exact"),
], ids=["none", "required", "named"])
def test_tool_choice_picks_the_branches(live, choice, mode) -> None:
    # the model is asked for what the choice rules out: a call under none, an answer else
    text = "OFF" if choice == "none" else "answer"
    body = {"messages": [{"role": "user", "content": text}], "tools": TOOLS, "tool_choice": choice,
            "response_format": FORMAT, "max_tokens": 60, "temperature": 0}
    r, content, calls, finish = chat(live.url, body, False)
    assert r.headers["x-afm-constraint-mode"] == mode and "x-grammar-constraints" not in r.headers
    if choice == "none":
        assert calls == [] and finish == "stop"
        jsonschema.validate(json.loads(content), ANSWER)
    else:
        assert content == "" and [c["name"] for c in calls] == ["get_weather"]


def test_responses_text_format_with_tools(live) -> None:
    client = openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", max_retries=0)
    tools = [{"type": "function", "name": "get_weather", "strict": True, "parameters": CITY}]
    fmt = {"format": {"type": "json_schema", "name": "a", "schema": ANSWER, "strict": True}}
    raw = client.responses.with_raw_response.create(model="scripted", input="OFF", tools=tools, text=fmt,
                                                    max_output_tokens=60, temperature=0)
    assert raw.headers["x-afm-constraint-mode"] == "exact"
    response = raw.parse()
    assert [item.type for item in response.output] == ["message"]
    jsonschema.validate(json.loads(response.output_text), ANSWER)
    response = client.responses.create(model="scripted", input="CALL", tools=tools, text=fmt,
                                       max_output_tokens=60)
    calls = [item for item in response.output if item.type == "function_call"]
    assert [c.name for c in calls] == ["get_weather"] and response.output_text == ""
    jsonschema.validate(json.loads(calls[0].arguments), CITY)


def test_messages_output_config_format_with_tools(live) -> None:
    client = anthropic.Anthropic(base_url=live.url, api_key="unused", max_retries=0, timeout=120)
    tools = [{"name": "get_weather", "strict": True, "input_schema": CITY}]
    fmt = {"format": {"type": "json_schema", "schema": ANSWER}}

    def send(text: str, stream: bool) -> Any:
        kwargs = {"model": "scripted", "max_tokens": 60, "messages": [{"role": "user", "content": text}],
                  "tools": tools, "output_config": fmt, "extra_body": {"temperature": 0}}
        if not stream:
            return client.messages.create(**kwargs)
        with client.messages.stream(**kwargs) as events:
            return events.get_final_message()

    message = send("OFF", stream=True)
    assert [b.type for b in message.content] == ["text"] and message.stop_reason == "end_turn"
    jsonschema.validate(json.loads(message.content[0].text), ANSWER)
    message = send("CALL", stream=False)
    assert [b.type for b in message.content] == ["tool_use"] and message.stop_reason == "tool_use"
    jsonschema.validate(message.content[0].input, CITY)
