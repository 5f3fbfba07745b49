"""Ollama's API over real HTTP on the scripted model, through the real ``ollama`` client
(PyPI, unmodified): chat and generate streamed (NDJSON) and not, ``format`` as "json" or a
pydantic schema, ``options`` mapped or refused, tools, thinking, errors in Ollama's shape
before and after the headers, and the model listing its clients use."""

from __future__ import annotations

import json
from typing import Any

import httpx
import ollama
import pytest
from pydantic import BaseModel

from afm_struct.testing import Script

from .conftest import wait_until

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
USER = [{"role": "user", "content": "hi"}]


class City(BaseModel):
    name: str
    population: int


def _client(live: Any) -> ollama.Client:
    return ollama.Client(host=live.url, timeout=60)


def _model(live: Any) -> str:
    return live.state.settings.model_names(live.loaded.info.id)[0]


def test_chat_whole_and_streamed(serve) -> None:
    live = serve("alpha beta gamma")
    client, model = _client(live), _model(live)
    done = client.chat(model=model, messages=USER)
    assert done.message.role == "assistant" and done.message.content == "alpha beta gamma"
    assert done.done is True and done.done_reason == "stop"
    assert done.eval_count and done.prompt_eval_count and done.created_at
    parts = list(client.chat(model=model, messages=USER, stream=True))
    assert len(parts) > 2 and all(p.done is False for p in parts[:-1]) and parts[-1].done is True
    assert "".join(p.message.content for p in parts) == "alpha beta gamma"
    assert parts[-1].done_reason == "stop" and parts[-1].eval_count == done.eval_count


def test_streaming_is_ndjson_and_the_default(serve) -> None:
    live = serve("alpha beta")
    with httpx.stream("POST", f"{live.url}/api/chat", json={"model": _model(live), "messages": USER},
                      timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(x) for x in r.iter_lines() if x]
    assert lines[-1]["done"] is True and all(x["done"] is False for x in lines[:-1])


def test_generate_applies_the_template_unless_raw(serve, tokenizer) -> None:
    live = serve(Script(lambda ids: "templated" if "<|im_start|>" in tokenizer.decode(ids) else "raw"))
    client, model = _client(live), _model(live)
    assert client.generate(model=model, prompt="hello").response == "templated"
    assert client.generate(model=model, prompt="hello", raw=True).response == "raw"
    streamed = list(client.generate(model=model, prompt="hello", stream=True))
    assert "".join(p.response for p in streamed) == "templated" and streamed[-1].done
    # no prompt: Ollama's "load" answer
    loaded = client.generate(model=model)
    assert loaded.done and loaded.done_reason == "load" and loaded.response == ""


def test_format_json_and_pydantic_schema_are_enforced(serve) -> None:
    live = serve('Here: {"name": "Paris", "population": 2100000} ok')
    client, model = _client(live), _model(live)
    out = client.chat(model=model, messages=USER, format=City.model_json_schema(),
                      options={"num_predict": 60})
    City.model_validate_json(out.message.content)  # the mask steered prose into the schema
    any_json = client.generate(model=model, prompt="x", format="json", options={"num_predict": 60})
    assert isinstance(json.loads(any_json.response), dict)
    with pytest.raises(ollama.ResponseError) as info:
        client.chat(model=model, messages=USER,
                    format={"type": "object", "properties": {"a": {"type": "nope"}}})
    assert info.value.status_code == 400


def test_options_are_mapped(serve) -> None:
    live = serve("alpha beta gamma delta epsilon")
    client, model = _client(live), _model(live)
    cut = client.chat(model=model, messages=USER, options={"num_predict": 2})
    assert cut.done_reason == "length" and cut.eval_count == 2
    stopped = client.generate(model=model, prompt="x", options={"stop": [" gamma"], "temperature": 0,
                                                                "seed": 1, "top_p": 0.9, "num_ctx": 4096})
    assert stopped.response == "alpha beta" and stopped.done_reason == "stop"


@pytest.mark.parametrize(("options", "named"), [
    ({"mirostat": 2}, "options.mirostat"), ({"typical_p": 0.5}, "options.typical_p"),
    ({"frequency_penalty": 0.5}, "options.frequency_penalty"),
    ({"no_such_option": 1}, "options.no_such_option"),
    ({"temperature": -1}, "options.temperature"), ({"num_predict": 0}, "options.num_predict"),
])
def test_unsupported_options_are_refused_naming_them(serve, options, named) -> None:
    live = serve()
    with pytest.raises(ollama.ResponseError) as info:
        _client(live).chat(model=_model(live), messages=USER, options=options)
    assert info.value.status_code == 400 and named in info.value.error


def test_neutral_values_of_unsupported_options_are_accepted(serve) -> None:
    live = serve("ok")
    out = _client(live).chat(model=_model(live), messages=USER,
                             options={"mirostat": 0, "typical_p": 1.0, "presence_penalty": 0.0})
    assert out.message.content == "ok"


def test_tools_whole_and_streamed(serve) -> None:
    live = serve(CALL)
    client, model = _client(live), _model(live)
    out = client.chat(model=model, messages=USER, tools=[WEATHER])
    calls = out.message.tool_calls
    assert calls and calls[0].function.name == "get_weather"
    assert calls[0].function.arguments == {"city": "Paris"}
    assert out.done_reason == "stop" and "<tool_call>" not in out.message.content
    parts = list(client.chat(model=model, messages=USER, tools=[WEATHER], stream=True))
    streamed = [c for p in parts for c in (p.message.tool_calls or ())]
    assert [(c.function.name, dict(c.function.arguments)) for c in streamed] == [
        ("get_weather", {"city": "Paris"})]
    # the call and its result go back as history
    history = [*USER, {"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "sunny", "tool_name": "get_weather"}]
    assert client.chat(model=model, messages=history, tools=[WEATHER]).done


def test_errors_are_ollama_shaped(serve) -> None:
    live = serve()
    client = _client(live)
    with pytest.raises(ollama.ResponseError) as info:
        client.chat(model="no-such-model", messages=USER)
    assert info.value.status_code == 404 and "no-such-model" in info.value.error
    r = httpx.post(f"{live.url}/api/chat", content=b"{not json", timeout=30)
    assert r.status_code == 400 and isinstance(r.json()["error"], str)
    r = httpx.post(f"{live.url}/api/chat", json={"messages": USER}, timeout=30)
    assert r.status_code == 400 and "model" in r.json()["error"]
    r = httpx.post(f"{live.url}/api/generate", json={"model": _model(live), "prompt": "x", "suffix": "y"})
    assert r.status_code == 400 and "suffix" in r.json()["error"]


def test_mid_stream_failure_is_an_error_line(serve) -> None:
    live = serve(Script("one two three four five six", fail_at=3))
    client = _client(live)
    with pytest.raises(ollama.ResponseError) as info:
        list(client.chat(model=_model(live), messages=USER, stream=True))
    assert "generation" in info.value.error.lower() or "failed" in info.value.error.lower()
    with pytest.raises(ollama.ResponseError) as whole:
        client.chat(model=_model(live), messages=USER)
    assert whole.value.status_code == 500


def test_model_listing(serve) -> None:
    live = serve(served_model_names=("smollm2", "other"))
    client = _client(live)
    assert [m.model for m in client.list().models] == ["smollm2", "other"]
    shown = client.show("smollm2:latest")  # Ollama's clients add the tag
    assert shown.modelinfo["general.context_length"] == 8192 and "tools" in shown.capabilities
    assert client.chat(model="smollm2:latest", messages=USER).model == "smollm2"
    assert [m.model for m in client.ps().models] == ["smollm2"]
    assert httpx.get(f"{live.url}/api/version").json()["version"]
    for path in ("/api/tags", "/api/ps", "/api/version"):  # every GET route answers HEAD
        head = httpx.head(f"{live.url}{path}")
        assert head.status_code == 200 and head.content == b""
    with pytest.raises(ollama.ResponseError):
        client.show("nope")


def test_logprobs(serve) -> None:
    live = serve("alpha beta")
    out = _client(live).chat(model=_model(live), messages=USER, logprobs=True, top_logprobs=2)
    assert "".join(lp.token for lp in out.logprobs) == "alpha beta"
    assert all(len(lp.top_logprobs) == 2 for lp in out.logprobs)


def test_a_client_that_goes_away_stops_its_generation(serve) -> None:
    live = serve(Script(" ".join(f"w{i}" for i in range(400)), delay_s=0.02))
    with httpx.stream("POST", f"{live.url}/api/chat", timeout=60,
                      json={"model": _model(live), "messages": USER, "options": {"num_predict": 400}}) as r:
        next(x for x in r.iter_lines() if x)
    assert wait_until(lambda: live.state.scheduler.load[0] == 0)
    assert live.loaded.model.calls < 300


def test_format_sets_the_constraint_mode_header(serve) -> None:
    live = serve('{"name": "Paris", "population": 1}')
    body = {"model": _model(live), "messages": USER, "stream": False, "format": City.model_json_schema()}
    r = httpx.post(f"{live.url}/api/chat", json=body, timeout=60)
    assert r.status_code == 200 and r.headers["x-afm-constraint-mode"] == "exact"
    r = httpx.post(f"{live.url}/api/chat", json={**body, "format": 5}, timeout=60)
    assert r.status_code == 400 and "format" in r.json()["error"]


def test_cancel_by_request_id_ends_the_stream_cancelled(serve) -> None:
    """Ollama has no cancel route; the server's own reaches these requests by X-Request-ID."""
    live = serve(Script(" ".join(f"w{i}" for i in range(400)), delay_s=0.02))
    with httpx.stream("POST", f"{live.url}/api/generate", timeout=60, headers={"X-Request-ID": "oll-1"},
                      json={"model": _model(live), "prompt": "go", "options": {"num_predict": 300}}) as r:
        lines = r.iter_lines()
        first = json.loads(next(x for x in lines if x))
        cancel = httpx.post(f"{live.url}/v1/completions/oll-1/cancel")
        assert cancel.status_code == 200 and cancel.json()["cancelled"] is True
        rest = [json.loads(x) for x in lines if x]
    assert first["done"] is False and rest[-1]["done"] is True and rest[-1]["done_reason"] == "cancelled"
    assert rest[-1]["eval_count"] < 300


def test_format_with_tools_is_a_conflict_not_a_dropped_constraint(serve) -> None:
    live = serve(CALL)
    with pytest.raises(ollama.ResponseError) as info:
        _client(live).chat(model=_model(live), messages=USER, tools=[WEATHER], format="json")
    assert info.value.status_code == 400 and "format and tools" in info.value.error
