"""The official openai SDK against the server: the embedded model (marked ``model``) and scripted."""

from __future__ import annotations

import json

import openai
import pytest
from pydantic import BaseModel

from afm_struct.testing import Script

from .conftest import decode, stream_raw

MESSAGES = [{"role": "user", "content": "Name one colour."}]


def _sdk(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.mark.model
def test_sdk_streaming_with_usage(real_server) -> None:
    client = _sdk(real_server.url)
    stream = client.chat.completions.create(
        model="SmolLM2-135M-Instruct", messages=MESSAGES, stream=True, max_tokens=12, temperature=0,
        stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert text.strip() and finishes in (["stop"], ["length"])
    assert chunks[0].choices[0].delta.role == "assistant"
    assert not chunks[-1].choices and chunks[-1].usage.completion_tokens <= 12
    assert len({c.id for c in chunks}) == 1


@pytest.mark.model
def test_sdk_non_streaming_matches_streaming(real_server) -> None:
    client = _sdk(real_server.url)
    kwargs = {"model": "SmolLM2-135M-Instruct", "messages": MESSAGES, "max_tokens": 12, "temperature": 0}
    plain = client.chat.completions.create(**kwargs)
    streamed = "".join(c.choices[0].delta.content or "" for c in
                       client.chat.completions.create(stream=True, **kwargs) if c.choices)
    assert plain.object == "chat.completion" and plain.model == "SmolLM2-135M-Instruct"
    assert plain.choices[0].message.content == streamed  # greedy: the same text both ways
    assert plain.usage.total_tokens == plain.usage.prompt_tokens + plain.usage.completion_tokens
    raw = client.chat.completions.with_raw_response.create(**kwargs)
    assert raw.headers["x-request-id"] == raw.headers["openai-request-id"]
    assert raw.request_id == raw.headers["x-request-id"] or raw.request_id is None


@pytest.mark.model
def test_sdk_parse_with_pydantic_model(real_server) -> None:
    pytest.importorskip("afm_struct.grammar.compiler")

    class Colour(BaseModel):
        name: str
        hex_code: str

    client = _sdk(real_server.url)
    completion = client.chat.completions.parse(
        model="SmolLM2-135M-Instruct", response_format=Colour, temperature=0, max_tokens=60,
        messages=[{"role": "user", "content": "Give the colour red as JSON with name and hex_code."}])
    parsed = completion.choices[0].message.parsed
    assert isinstance(parsed, Colour) and parsed.name
    assert "```" not in completion.choices[0].message.content


@pytest.mark.model
def test_sdk_models_and_errors(real_server) -> None:
    client = _sdk(real_server.url)
    assert [m.id for m in client.models.list()] == ["SmolLM2-135M-Instruct"]
    with pytest.raises(openai.NotFoundError) as exc:
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert exc.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(messages=MESSAGES, n=2, model="SmolLM2-135M-Instruct")
    assert exc.value.body["param"] == "n"


@pytest.mark.model
def test_real_model_profile_and_stream(real_server) -> None:
    _, payloads = stream_raw(real_server.url, {"messages": MESSAGES, "max_tokens": 16, "temperature": 0,
                                               "stream_options": {"include_usage": True}},
                             {"X-AFM-Profile": "true"})
    events = decode(payloads)
    profile = events[-1]["afm_profile"]
    info = real_server.loaded.info
    assert profile["memory"]["weights_bytes"] == info.weight_bytes > 0
    assert profile["memory"]["kv_cache_bytes"] > 0
    assert profile["decode_tok_s"] > 0 and profile["prefill_tok_s"] > 0  # rates, not speed targets
    assert profile["estimated_bandwidth_gbps"] > 0
    assert profile["tokens"]["completion"] == events[-2]["usage"]["completion_tokens"]


def test_sdk_raises_on_a_mid_stream_error_chunk(serve) -> None:
    live = serve(Script("one two three four five", fail_at=2))
    client = _sdk(live.url)
    seen = []
    with pytest.raises(openai.APIError) as exc:
        for chunk in client.chat.completions.create(model="scripted", messages=MESSAGES, stream=True):
            seen.append(chunk.choices[0].delta.content)
    assert "generation failed" in exc.value.message and "scripted failure" not in exc.value.message
    assert seen and seen[0]  # the deltas before the failure were delivered


def test_sdk_streams_from_scripted_model(serve) -> None:
    live = serve('{"a": 1}')
    client = _sdk(live.url)
    text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="scripted", messages=MESSAGES, stream=True) if c.choices)
    assert json.loads(text) == {"a": 1}
