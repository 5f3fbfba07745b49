"""logprobs / top_logprobs over HTTP: OpenAI's shape, streaming and not, content and tool calls."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from afm_struct.client import Client

from .conftest import USER, decode, stream_raw

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "strict": True, "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'
ARGS = '{"city": "Paris", "unit": "celsius"}'


def post(url: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json={"messages": USER, **body}, timeout=60)


def check_entry(entry: dict[str, Any], top: int) -> None:
    """One logprobs.content item has OpenAI's fields and sane values."""
    assert set(entry) == {"token", "logprob", "bytes", "top_logprobs"}
    assert entry["logprob"] <= 0.0 and isinstance(entry["bytes"], list)
    if not entry["token"].startswith("bytes:"):
        assert bytes(entry["bytes"]) == entry["token"].encode()
    alts = entry["top_logprobs"]
    assert len(alts) <= top and all(set(a) == {"token", "logprob", "bytes"} for a in alts)
    values = [a["logprob"] for a in alts]
    assert values == sorted(values, reverse=True) and all(v <= 0 for v in values)
    assert sum(2.718281828459045 ** v for v in values) <= 1 + 1e-4


def stream_events(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    response, payloads = stream_raw(url, {"messages": USER, **body})
    assert response.status_code == 200
    return decode(payloads)


@pytest.mark.parametrize("top", [0, 5])
def test_non_streaming_content_logprobs(serve, top) -> None:
    live = serve("Hello café, world!")
    r = post(live.url, {"logprobs": True, "top_logprobs": top, "temperature": 0})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    lp = choice["logprobs"]
    assert lp["refusal"] is None
    assert "".join(e["token"] for e in lp["content"]) == choice["message"]["content"] == "Hello café, world!"
    for e in lp["content"]:
        check_entry(e, top)
        assert len(e["top_logprobs"]) == top  # the scripted model's noise keeps every token finite
        if top:
            assert e["top_logprobs"][0]["token"] == e["token"]  # greedy: the top token is chosen


def test_logprobs_true_alone_gives_entries_without_alternatives(serve) -> None:
    live = serve("Hi there")
    lp = post(live.url, {"logprobs": True}).json()["choices"][0]["logprobs"]
    assert lp["content"] and all(e["top_logprobs"] == [] for e in lp["content"])


def test_not_asked_is_null(serve) -> None:
    live = serve("Hi there")
    assert post(live.url, {}).json()["choices"][0]["logprobs"] is None
    events = stream_events(live.url, {"logprobs": False})
    assert all(c["logprobs"] is None for e in events for c in e["choices"])


@pytest.mark.parametrize("top", [0, 5])
def test_streaming_each_chunk_carries_the_tokens_of_its_delta(serve, top) -> None:
    live = serve("Hello café, world! Bye.")
    body = {"logprobs": True, "top_logprobs": top, "temperature": 0,
            "stream_options": {"include_usage": True}}
    events = stream_events(live.url, body)
    entries = []
    for e in events:
        if not e["choices"]:
            continue  # the usage chunk
        choice = e["choices"][0]
        if choice["finish_reason"] is not None:
            assert choice["logprobs"] is None
            continue
        text = choice["delta"]["content"]
        assert "".join(x["token"] for x in choice["logprobs"]["content"]) == text
        entries += choice["logprobs"]["content"]
    for x in entries:
        check_entry(x, top)
    plain = post(live.url, body).json()["choices"][0]["logprobs"]["content"]
    assert plain == entries  # greedy: the same tokens and numbers both ways
    assert events[-1]["usage"]["completion_tokens"] == len(entries)  # every token is shown


def test_stop_string_tokens_are_not_reported(serve) -> None:
    live = serve("Hello there, world! Bye")
    r = post(live.url, {"logprobs": True, "stop": [", world"], "temperature": 0}).json()
    choice = r["choices"][0]
    assert choice["message"]["content"] == "Hello there"
    assert "".join(e["token"] for e in choice["logprobs"]["content"]) == "Hello there"


def test_reasoning_tokens_are_not_reported(serve) -> None:
    live = serve("<think>The user greets me.</think>\n\nHello!", reasoning="think")
    r = post(live.url, {"logprobs": True, "top_logprobs": 2}).json()
    message, lp = r["choices"][0]["message"], r["choices"][0]["logprobs"]
    assert message["reasoning_content"] == "The user greets me."
    assert "".join(e["token"] for e in lp["content"]) == "Hello!"
    for e in stream_events(live.url, {"logprobs": True}):
        for c in e["choices"]:
            if "reasoning_content" in c["delta"]:
                assert c["logprobs"] is None
            elif c["delta"].get("content"):
                assert "".join(x["token"] for x in c["logprobs"]["content"]) == c["delta"]["content"]


def test_json_schema_forced_tokens_have_logprob_zero(serve) -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    live = serve('{"name": "Ada", "age": 36}')
    fmt = {"type": "json_schema", "json_schema": {"name": "p", "strict": True, "schema": schema}}
    r = post(live.url, {"logprobs": True, "top_logprobs": 3, "response_format": fmt, "temperature": 0}).json()
    choice = r["choices"][0]
    entries = choice["logprobs"]["content"]
    assert "".join(e["token"] for e in entries) == choice["message"]["content"]
    key = next(e for e in entries if e["token"] == "age")  # the second key is forced
    assert key["logprob"] == 0.0 and key["top_logprobs"] == [{"token": "age", "logprob": 0.0,
                                                               "bytes": list(b"age")}]


@pytest.mark.parametrize("stream", [False, True])
def test_tool_call_argument_tokens(serve, stream) -> None:
    live = serve(CALL)
    body = {"tools": [WEATHER], "tool_choice": "required", "parallel_tool_calls": False,
            "logprobs": True, "top_logprobs": 2, "temperature": 0}
    if not stream:
        r = post(live.url, body).json()
        choice = r["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        assert choice["message"]["tool_calls"][0]["function"]["arguments"] == ARGS
        text = "".join(e["token"] for e in choice["logprobs"]["content"])
        assert ARGS in text and "</tool_call>" not in text
        return
    events = stream_events(live.url, body)
    chunks = [e["choices"][0] for e in events if e["choices"] and e["choices"][0]["delta"]]
    args = ""
    for c in chunks:
        (call,) = c["delta"]["tool_calls"]
        frag = call["function"]["arguments"]
        args += frag
        toks = "".join(x["token"] for x in c["logprobs"]["content"])
        if "id" in call:  # the call's start carries its markup and name tokens
            assert "get_weather" in toks
        else:
            assert frag in toks and c["logprobs"]["content"]
    assert args == ARGS


@pytest.mark.parametrize("body,param", [
    ({"top_logprobs": 3}, "top_logprobs"),
    ({"logprobs": False, "top_logprobs": 0}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": -1}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": "many"}, "top_logprobs"),
])
def test_bad_values_are_400_with_the_parameter(serve, body, param) -> None:
    live = serve("Hi")
    for stream in (False, True):
        r = post(live.url, {**body, "stream": stream})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == param and err["type"] == "invalid_request_error"


def test_openai_sdk_parses_the_shape(serve) -> None:
    live = serve("Hello there, world!")
    client = openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", max_retries=0, timeout=60)
    resp = client.chat.completions.create(model="scripted", messages=USER, logprobs=True, top_logprobs=3,
                                          temperature=0)
    content = resp.choices[0].logprobs.content
    assert content[0].top_logprobs[0].token == content[0].token == "Hello"
    assert content[0].bytes == list(b"Hello") and content[0].logprob <= 0
    assert "".join(t.token for t in content) == resp.choices[0].message.content
    stream = client.chat.completions.create(model="scripted", messages=USER, logprobs=True,
                                            top_logprobs=1, temperature=0, stream=True)
    streamed = [t for c in stream if c.choices and c.choices[0].logprobs
                for t in c.choices[0].logprobs.content or ()]
    assert [t.token for t in streamed] == [t.token for t in content]
    assert all(len(t.top_logprobs) == 1 for t in streamed)


def test_client_assembles_logprobs_both_ways(serve) -> None:
    live = serve("Hello there, world!")
    with Client(live.url) as client:
        streamed = client.chat(USER, logprobs=True, top_logprobs=2, temperature=0)
        plain = client.chat(USER, stream=False, logprobs=True, top_logprobs=2, temperature=0)
        off = client.chat(USER, temperature=0)
    assert streamed.logprobs == plain.logprobs and off.logprobs is None
    assert "".join(e["token"] for e in plain.logprobs or ()) == plain.content


@pytest.mark.model
def test_real_model_logprobs(real_server) -> None:
    """The embedded model: greedy picks the top alternative; sampled logprobs are consistent."""
    body = {"messages": [{"role": "user", "content": "Name one colour."}], "max_tokens": 10,
            "logprobs": True, "top_logprobs": 5}
    r = httpx.post(f"{real_server.url}/v1/chat/completions", json={**body, "temperature": 0}, timeout=120)
    choice = r.json()["choices"][0]
    entries = choice["logprobs"]["content"]
    assert "".join(e["token"] for e in entries) == choice["message"]["content"]
    for e in entries:
        check_entry(e, 5)
        assert len(e["top_logprobs"]) == 5
        assert e["top_logprobs"][0]["token"] == e["token"]
        assert e["logprob"] == pytest.approx(e["top_logprobs"][0]["logprob"])
    # a real distribution: the first token is not certain
    assert entries[0]["logprob"] < -0.001 and entries[0]["top_logprobs"][1]["logprob"] > -20
    sampled = httpx.post(f"{real_server.url}/v1/chat/completions",
                         json={**body, "temperature": 0.8, "top_k": 3, "seed": 7}, timeout=120).json()
    for e in sampled["choices"][0]["logprobs"]["content"]:
        check_entry(e, 5)
        assert len(e["top_logprobs"]) <= 3  # top_k=3 removed the rest of the vocabulary
        assert e["logprob"] in [a["logprob"] for a in e["top_logprobs"]]
    json.dumps(sampled)  # finite numbers only


# -- the routing of entries to deltas (pure) ---------------------------------------------------


def _entries(text: str, pieces: list[str]) -> list[Any]:
    from afm_struct.decoding.logprobs import TokenLogprob

    out, at = [], 0
    for p in pieces:
        assert text[at:at + len(p)] == p
        out.append(TokenLogprob(p, 0, -0.5, tuple(p.encode()), (), at, at + len(p)))
        at += len(p)
    return out


def test_routing_drops_swallowed_tokens_and_keeps_held_ones() -> None:
    from afm_struct.turn.events import Reasoning, Text
    from server.logprob_routing import LogprobRouting

    text = "<think>Plan.</think>\n\nHi <b"
    e = _entries(text, ["<think>", "Plan", ".", "</think>", "\n\n", "Hi", " <", "b"])
    r = LogprobRouting()
    assert r.assign("<think>", [], e[:1]) == []  # the tag: nothing shown yet
    assert r.assign("Plan.", [Reasoning("Plan.")], e[1:3]) == [None]
    assert r.assign("</think>\n\n", [], e[3:5]) == []
    # "Hi <" arrives; the router holds " <" (a possible tag) back
    (slot,) = r.assign("Hi <", [Text("Hi")], e[5:7])
    assert [x.token for x in slot] == ["Hi"]  # not the tags, not the whitespace, not " <"
    (slot,) = r.assign("b", [Text(" <b")], e[7:])
    assert [x.token for x in slot] == [" <", "b"]


def test_deferred_entries_are_cut_to_the_sanitized_text() -> None:
    from server.logprob_routing import within

    raw = '```json\n{"a": 1}\n```'
    e = _entries(raw, ["```", "json", "\n", '{"', "a", '":', " 1", "}", "\n", "```"])
    assert "".join(x.token for x in within(e, raw, '{"a": 1}')) == '{"a": 1}'
    assert within(e, raw, raw) == e
