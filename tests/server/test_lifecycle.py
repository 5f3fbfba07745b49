"""The streaming and non-streaming lifecycle over real HTTP (scripted model)."""

from __future__ import annotations

import json

import httpx

from afm_struct.testing import Script

from .conftest import USER, decode, stream_raw

SCRIPT = "First line\nsecond line."


def test_stream_lifecycle_order_and_identity(serve) -> None:
    live = serve(SCRIPT)
    response, payloads = stream_raw(live.url, {"messages": USER, "stream_options": {"include_usage": True}})
    assert response.status_code == 200
    events = decode(payloads)
    chunks, usage = events[:-1], events[-1]
    *deltas, finish = chunks
    # the first delta carries the role; content deltas follow; then the finish chunk
    assert deltas[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all("role" not in d["choices"][0]["delta"] for d in deltas[1:])
    assert "".join(d["choices"][0]["delta"].get("content", "") for d in deltas) == SCRIPT
    assert all(d["choices"][0]["finish_reason"] is None for d in deltas)
    assert finish["choices"][0]["delta"] == {} and finish["choices"][0]["finish_reason"] == "stop"
    # the usage chunk: empty choices, top-level usage that counts the tokens
    assert usage["choices"] == [] and set(usage["usage"]) == {"prompt_tokens", "completion_tokens",
                                                              "total_tokens"}
    n_tokens = len(live.loaded.tokenizer.encode(SCRIPT))
    assert usage["usage"]["completion_tokens"] == n_tokens
    assert usage["usage"]["total_tokens"] == usage["usage"]["prompt_tokens"] + n_tokens
    # every chunk repeats the same id, object, created, model
    assert {(c["id"], c["object"], c["created"], c["model"]) for c in events} == {
        (events[0]["id"], "chat.completion.chunk", events[0]["created"], "scripted")}
    assert events[0]["id"].startswith("chatcmpl-")


def test_stream_headers_echo_the_inbound_request_id(serve) -> None:
    live = serve()
    response, payloads = stream_raw(live.url, {"messages": USER}, {"X-Request-ID": "stream-8f31"})
    assert response.headers["content-type"] == "text/event-stream"
    assert response.headers["cache-control"] == "no-cache"
    assert response.headers["x-accel-buffering"] == "no"
    assert response.headers["x-request-id"] == "stream-8f31"
    assert response.headers["openai-request-id"] == "stream-8f31"
    assert "x-grammar-constraints" not in response.headers
    assert payloads[-1] == "[DONE]"


def test_generated_request_id_when_none_is_sent(serve) -> None:
    live = serve()
    r1, _ = stream_raw(live.url, {"messages": USER})
    r2, _ = stream_raw(live.url, {"messages": USER})
    assert r1.headers["x-request-id"] == r1.headers["openai-request-id"]
    assert r1.headers["x-request-id"] != r2.headers["x-request-id"]


def test_usage_chunk_only_when_asked(serve) -> None:
    live = serve()
    _, payloads = stream_raw(live.url, {"messages": USER})
    events = decode(payloads)
    assert all(e["choices"] for e in events) and all("usage" not in e for e in events)
    assert events[-1]["choices"][0]["finish_reason"] == "stop"
    _, payloads = stream_raw(live.url, {"messages": USER, "stream_options": {"include_usage": False}})
    assert all("usage" not in e for e in decode(payloads))


def test_done_is_last_and_the_body_closes(serve) -> None:
    live = serve()
    with httpx.stream("POST", f"{live.url}/v1/chat/completions",
                      json={"messages": USER, "stream": True}) as response:
        raw = response.read()  # returns only because the server closed the body
    assert raw.endswith(b"data: [DONE]\n\n")
    assert raw.count(b"[DONE]") == 1


def test_length_finish_reason(serve) -> None:
    live = serve("one two three four five six seven")
    _, payloads = stream_raw(live.url, {"messages": USER, "max_tokens": 3,
                                        "stream_options": {"include_usage": True}})
    events = decode(payloads)
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    assert events[-1]["usage"]["completion_tokens"] == 3


def test_stop_sequence_ends_with_stop_and_is_not_emitted(serve) -> None:
    live = serve("alpha beta END gamma")
    _, payloads = stream_raw(live.url, {"messages": USER, "stop": ["END"]})
    events = decode(payloads)
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events)
    assert text == "alpha beta " and events[-1]["choices"][0]["finish_reason"] == "stop"


def test_reasoning_and_content_are_separate_channels(serve) -> None:
    live = serve("<think>The user greets me.</think>\n\nHello!", reasoning="think")
    _, payloads = stream_raw(live.url, {"messages": USER})
    events = decode(payloads)
    deltas = [e["choices"][0]["delta"] for e in events[:-1]]
    assert deltas[0]["role"] == "assistant"
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    content = "".join(d.get("content", "") for d in deltas)
    assert reasoning == "The user greets me." and content == "Hello!"
    # reasoning comes first and no delta mixes the two channels
    assert all(not ("content" in d and "reasoning_content" in d) for d in deltas)
    first_content = next(i for i, d in enumerate(deltas) if d.get("content"))
    assert all("reasoning_content" not in d for d in deltas[first_content:])
    r = httpx.post(f"{live.url}/v1/chat/completions", json={"messages": USER}).json()
    assert r["choices"][0]["message"]["reasoning_content"] == "The user greets me."
    assert r["choices"][0]["message"]["content"] == "Hello!"


def test_role_chunk_even_when_nothing_is_generated(serve) -> None:
    live = serve("")
    _, payloads = stream_raw(live.url, {"messages": USER})
    events = decode(payloads)
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert events[-1]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}


def test_non_streaming_completion(serve) -> None:
    live = serve(SCRIPT)
    r = httpx.post(f"{live.url}/v1/chat/completions", json={"messages": USER},
                   headers={"X-Request-ID": "ns-1"})
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert r.headers["x-request-id"] == "ns-1" and r.headers["openai-request-id"] == "ns-1"
    body = r.json()
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    assert body["model"] == "scripted"
    choice = body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": SCRIPT}
    assert choice["finish_reason"] == "stop"
    assert body["usage"]["completion_tokens"] == len(live.loaded.tokenizer.encode(SCRIPT))
    assert "afm_profile" not in body


def test_prompt_reaches_the_model_through_the_chat_template(serve) -> None:
    seen: list[str] = []

    def echo(ids: list[int]) -> str:
        seen.append(live.loaded.tokenizer.decode(ids))
        return "ok"

    live = serve(Script(echo))
    r = httpx.post(f"{live.url}/v1/chat/completions", json={"messages": [
        {"role": "system", "content": "SYS"}, {"role": "user", "content": [{"type": "text", "text": "U1"}]},
        {"role": "assistant", "content": "A1"}, {"role": "user", "content": "U2"}]})
    assert r.status_code == 200
    prompt = seen[0]
    assert prompt.index("SYS") < prompt.index("U1") < prompt.index("A1") < prompt.index("U2")
    assert prompt.rstrip().endswith("assistant")


def test_models_health_and_openapi(serve) -> None:
    live = serve()
    models = httpx.get(f"{live.url}/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["id"] == "scripted"
    health = httpx.get(f"{live.url}/health").json()
    assert health["status"] == "ok" and health["model"] == "scripted"
    spec = httpx.get(f"{live.url}/openapi.json").json()
    paths = spec["paths"]
    assert {"/v1/chat/completions", "/v1/chat/completions/{request_id}/cancel", "/v1/models",
            "/health"} <= set(paths)
    assert "ChatCompletionRequest" in json.dumps(spec["components"])
    # validation errors are documented as the 400 envelope, never FastAPI's 422 shape
    responses = paths["/v1/chat/completions"]["post"]["responses"]
    assert "422" not in responses and "400" in responses


def test_model_field_may_name_the_loaded_model(serve) -> None:
    live = serve()
    r = httpx.post(f"{live.url}/v1/chat/completions", json={"messages": USER, "model": "scripted"})
    assert r.status_code == 200 and r.json()["model"] == "scripted"
