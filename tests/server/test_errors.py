"""Errors: the JSON envelope with the right status before headers; an error chunk after."""

from __future__ import annotations

import json
import logging
import socket

import httpx
import pytest

from afm_struct.testing import Script

from .conftest import USER, decode, stream_raw

ENVELOPE_KEYS = {"message", "type", "param", "code"}


def _envelope(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == ENVELOPE_KEYS
    assert r.headers["x-request-id"] and r.headers["openai-request-id"] == r.headers["x-request-id"]
    return body["error"]


def _post(url: str, **kwargs) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", timeout=30, **kwargs)


def test_bad_json_is_400(serve) -> None:
    live = serve()
    r = _post(live.url, content=b'{"messages": [', headers={"Content-Type": "application/json"})
    err = _envelope(r, 400)
    assert err["type"] == "invalid_request_error" and err["code"] == "invalid_json"


@pytest.mark.parametrize(("content", "says"), [
    (b'{"messages": [{"role": "user", "content": "hi"}], "x": ' + b"[" * 5000 + b"]" * 5000 + b"}",
     "nests arrays or objects deeper"),
    (b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', "not UTF-8 (byte 0xff at offset 43)"),
], ids=["too_deep", "not_utf8"])
def test_a_body_json_cannot_read_names_why(serve, content: bytes, says: str) -> None:
    """Bodies FastAPI's parser fails on other than by syntax (recursion, bad bytes) get the
    cause and a code, not "There was an error parsing the body" with code null."""
    live = serve()
    err = _envelope(_post(live.url, content=content, headers={"Content-Type": "application/json"}), 400)
    assert err["code"] == "invalid_json" and says in err["message"], err


@pytest.mark.parametrize(("body", "param"), [
    ({}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages.0.role"),
    ({"messages": USER, "temperature": -1}, "temperature"),
    ({"messages": USER, "max_tokens": 0}, "max_tokens"),
    ({"messages": USER, "response_format": {"type": "yaml"}}, "response_format"),
])
def test_validation_errors_are_400_not_422(serve, body, param) -> None:
    live = serve()
    err = _envelope(_post(live.url, json=body), 400)
    assert err["type"] == "invalid_request_error"
    assert err["param"] is not None and err["param"].startswith(param)


@pytest.mark.parametrize(("extra", "param"), [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "", "schema": {}}}},
     "response_format.json_schema.name"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}},
     "response_format.json_schema.name"),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
     "messages.0.content.0.text"),
    ({"stop": 5}, "stop"),
    ({"tool_choice": {"type": "function"}}, "tool_choice.function"),
    ({"tools": [{"type": "function", "function": {"name": "two words"}}]}, "tools.0.function.name"),
])
def test_validation_error_param_is_the_request_path(serve, extra, param) -> None:
    """pydantic's loc names union branches and tags (``json_schema.json_schema.name``); the
    error names the path in the request."""
    live = serve()
    err = _envelope(_post(live.url, json={"messages": USER, **extra}), 400)
    assert err["param"] == param, err
    assert err["message"].startswith(param + ":"), err


@pytest.mark.parametrize(("messages", "param"), [
    ([{"role": "tool", "content": "x"}], "messages.0.tool_call_id"),
    ([{"role": "user"}], "messages.0.content"),
    ([{"role": "system", "content": "x"}, {"role": "user", "content": None}], "messages.1.content"),
])
def test_a_missing_message_field_is_named_as_missing(serve, messages, param) -> None:
    """A field the message lacks is named with ``missing_required_parameter`` (the path of a
    field to send, which the request does not hold yet: the suite-wide check accepts it so)."""
    live = serve()
    err = _envelope(_post(live.url, json={"messages": messages}), 400)
    assert (err["param"], err["code"]) == (param, "missing_required_parameter"), err


def test_unknown_fields_are_ignored(serve) -> None:
    live = serve()
    r = _post(live.url, json={"messages": USER, "frobnicate": True, "user": "u", "logit_bias": {}})
    assert r.status_code == 200


def test_n_greater_than_one_is_400(serve) -> None:
    live = serve()
    err = _envelope(_post(live.url, json={"messages": USER, "n": 3}), 400)
    assert err["param"] == "n" and "n=3" in err["message"]


def test_unknown_model_is_404(serve) -> None:
    live = serve()
    err = _envelope(_post(live.url, json={"messages": USER, "model": "gpt-9"}), 404)
    assert err["param"] == "model" and err["code"] == "model_not_found" and "scripted" in err["message"]


def test_unknown_tool_in_tool_choice_is_400(serve) -> None:
    live = serve()
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
    err = _envelope(_post(live.url, json={"messages": USER, "tools": tools, "tool_choice": {
        "type": "function", "function": {"name": "delete_everything"}}}), 400)
    assert err["code"] == "unknown_tool" and err["param"] == "tool_choice"


def test_tools_are_accepted_and_rendered(serve) -> None:
    live = serve()
    tools = [{"type": "function", "function": {"name": "read_file", "description": "Read a file",
                                               "parameters": {"type": "object"}}}]
    r = _post(live.url, json={"messages": USER, "tools": tools, "tool_choice": "auto",
                              "parallel_tool_calls": False})
    assert r.status_code == 200


def test_invalid_schema_is_400(serve) -> None:
    live = serve()
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "strict": True,
                                                  "schema": {"type": "object", "required": "a"}}}
    err = _envelope(_post(live.url, json={"messages": USER, "response_format": fmt}), 400)
    assert err["code"] == "invalid_schema"


def test_context_overflow_is_400(serve) -> None:
    live = serve(context_length=64)
    err = _envelope(_post(live.url, json={"messages": [{"role": "user", "content": "word " * 200}],
                                          "stream": True}), 400)
    assert err["code"] == "context_length_exceeded" and err["param"] == "messages"


@pytest.mark.parametrize("stream", [False, True])
def test_a_budget_the_context_cannot_hold_is_400_with_the_numbers(serve, stream) -> None:
    """Before: an 8191-token prompt with max_tokens 100 silently got a 1-token budget and a
    json_schema answer came back as '{"'.  Now an explicit max_tokens is honoured or refused
    (OpenAI's and vLLM's 400); an omitted one is capped by the context left."""
    context = 96
    live = serve('{"a": "some words to fill the budget"}', context_length=context)
    words = {"messages": [{"role": "user", "content": "word " * 40}]}
    probe = _post(live.url, json={**words, "max_tokens": 1}).json()
    prompt = probe["usage"]["prompt_tokens"]
    left = context - prompt
    assert 1 <= left < 40, prompt  # the prompt leaves a little room
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}}}
    for key in ("max_tokens", "max_completion_tokens"):
        r = _post(live.url, json={**words, "stream": stream, key: left + 1, "response_format": fmt})
        err = _envelope(r, 400)
        assert err["code"] == "context_length_exceeded" and err["param"] == "messages", err
        assert (f"maximum context length is {context} tokens. However, you requested {context + 1} "
                f"tokens ({prompt} in the messages, {left + 1} in the completion)") in err["message"]
    # What fits is served, and an omitted max_tokens takes the room left (finish_reason says so).
    fits = _post(live.url, json={**words, "max_tokens": left}).json()
    assert fits["usage"]["completion_tokens"] <= left
    free = _post(live.url, json={**words, "response_format": fmt}).json()
    assert free["usage"]["completion_tokens"] <= left
    assert free["choices"][0]["finish_reason"] in ("stop", "length")


def test_body_too_large_is_413(serve) -> None:
    live = serve(max_body_bytes=2048)
    big = {"messages": [{"role": "user", "content": "x" * 4096}]}
    err = _envelope(_post(live.url, json=big), 413)
    assert err["code"] == "payload_too_large"

    def chunks():  # no Content-Length: the limit applies while reading
        yield json.dumps(big).encode()

    err = _envelope(_post(live.url, content=chunks(), headers={"Content-Type": "application/json"}), 413)
    assert err["code"] == "payload_too_large"


def test_queue_full_is_503_with_retry_after(serve, caplog) -> None:
    caplog.set_level(logging.INFO)
    live = serve(Script("tick " * 300, delay_s=0.02), max_active=1, max_queue=0, retry_after_s=2)
    with httpx.stream("POST", f"{live.url}/v1/chat/completions", timeout=30,
                      json={"messages": USER, "stream": True}, headers={"X-Request-ID": "first"}) as first:
        assert first.status_code == 200
        r = _post(live.url, json={"messages": USER, "stream": True})
        err = _envelope(r, 503)
        assert r.headers["retry-after"] == "2"
        assert err["type"] == "overloaded_error" and err["code"] == "queue_full"
        # A busy replica works as designed: a warning, never an ERROR line for operators to chase.
        refused = [r for r in caplog.records if "busy" in r.getMessage()]
        assert refused and all(r.levelno == logging.WARNING for r in refused)
        assert httpx.post(f"{live.url}/v1/chat/completions/first/cancel").status_code == 200
        assert list(first.iter_lines())[-2] == "data: [DONE]"


def test_invalid_request_id_header_is_400(serve) -> None:
    live = serve()
    err = _envelope(_post(live.url, json={"messages": USER}, headers={"X-Request-ID": "a/b"}), 400)
    assert err["param"] == "X-Request-ID"


def test_unknown_route_and_method_use_the_envelope(serve) -> None:
    live = serve()
    _envelope(httpx.get(f"{live.url}/v1/nothing"), 404)
    _envelope(httpx.get(f"{live.url}/v1/chat/completions"), 405)


def test_mid_stream_error_is_an_error_chunk_before_done(serve, caplog) -> None:
    live = serve(Script("one two three four five six", fail_at=3))
    response, payloads = stream_raw(live.url, {"messages": USER, "stream_options": {"include_usage": True}})
    assert response.status_code == 200  # the status was sent before the failure
    events = decode(payloads)
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events
                   if e["choices"] and "error" not in e)
    # the deltas before the failure arrive intact (a proper prefix of the script)
    assert text and "one two three four five six".startswith(text) and len(text) < 20
    err_chunks = [e for e in events if "error" in e]
    assert len(err_chunks) == 1
    chunk = err_chunks[0]
    assert chunk["choices"][0]["finish_reason"] == "error"
    assert chunk["error"]["type"] == "server_error" and chunk["error"]["code"] == "generation_failed"
    # the engine's words stay in the server log, under the request's ID
    assert "scripted failure" not in chunk["error"]["message"]
    assert "the server log has the details" in chunk["error"]["message"]
    rid = response.headers["x-request-id"]
    assert any(rid in r.getMessage() and "scripted failure" in str(r.exc_info[1])
               for r in caplog.records if r.exc_info)
    assert chunk["error"]["message"] in chunk["choices"][0]["delta"]["content"]
    assert chunk["id"] == events[0]["id"]
    # no normal finish chunk; usage still follows, then [DONE]
    assert [e["choices"][0]["finish_reason"] for e in events if e["choices"]][-1] == "error"
    assert events[-1]["choices"] == [] and "usage" in events[-1]


def test_generation_error_without_streaming_is_an_http_error(serve) -> None:
    live = serve(Script("one two three four", fail_at=2))
    err = _envelope(_post(live.url, json={"messages": USER}), 500)
    assert err["type"] == "server_error" and err["code"] == "generation_failed"
    assert "scripted failure" not in err["message"] and "RuntimeError" not in err["message"]


def test_server_keeps_serving_after_errors(serve) -> None:
    live = serve(Script("one two three four", fail_at=2))
    for _ in range(3):
        stream_raw(live.url, {"messages": USER})
    assert live.state.scheduler.load[0] == 0
    assert httpx.get(f"{live.url}/health").json()["status"] == "ok"


def test_raw_garbage_request_never_yields_a_bare_500(serve) -> None:
    live = serve()
    host, port = live.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 4\r\n\r\n[1,2")
        reply = b""
        while b"}}" not in reply:  # headers and body may come in separate segments
            part = s.recv(4096)
            if not part:
                break
            reply += part
    assert reply.startswith(b"HTTP/1.1 400")
    assert b'"error"' in reply


def test_unexpected_failure_before_headers_is_a_500_envelope(serve, caplog) -> None:
    def broken_compiler(tokenizer, request):
        raise RuntimeError("compiler exploded")

    live = serve(compile_fn=broken_compiler)
    err = _envelope(_post(live.url, json={"messages": USER, "response_format": {"type": "json_object"}}), 500)
    assert err["type"] == "server_error" and err["code"] == "internal_error"
    assert "compiler exploded" not in err["message"] and "RuntimeError" not in err["message"]
    assert any("compiler exploded" in str(r.exc_info[1]) for r in caplog.records if r.exc_info)


def test_unexpected_failure_mid_stream_is_an_error_chunk(serve, caplog) -> None:
    class BadSanitizer:
        mode = "downgraded"
        reason = None

        def new_matcher(self):
            return None

        def sanitize(self, text: str) -> str:
            raise ValueError("sanitizer bug")

    live = serve('{"a": 1}', compile_fn=lambda tok, req: BadSanitizer())
    response, payloads = stream_raw(live.url, {"messages": USER, "response_format": {"type": "json_object"}})
    assert response.status_code == 200
    events = decode(payloads)
    assert "sanitizer bug" not in events[-1]["error"]["message"]
    assert any("sanitizer bug" in str(r.exc_info[1]) for r in caplog.records if r.exc_info)
    assert events[-1]["choices"][0]["finish_reason"] == "error"
    assert live.state.scheduler.load[0] == 0 and len(live.state.registry) == 0


_NO_INSTANCE = [
    {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}},
    {"allOf": [{"type": "string"}, {"type": "integer"}]},
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("schema", _NO_INSTANCE, ids=["ref_cycle", "disjoint_allof"])
def test_schema_without_instances_is_a_400_with_its_path(serve, schema, stream) -> None:
    """Both ways in (response_format, a tool's parameters, strict or not), before any stream."""
    live = serve()
    bodies = [
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": True,
                                                                     "schema": schema}}},
         "response_format.json_schema.schema", "(at $"),
        ({"tools": [{"type": "function", "function": {"name": "f", "strict": True, "parameters": schema}}],
          "tool_choice": "required"}, "tools.0.function.parameters", "(at $.tools[0].function.parameters"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": schema}}]},
         "tools.0.function.parameters", "(at $.tools[0].function.parameters"),
    ]
    for extra, param, where in bodies:
        response = _post(live.url, json={"messages": USER, "stream": stream, **extra})
        err = _envelope(response, 400)
        assert err["code"] == "invalid_schema" and err["param"] == param, err
        assert "no valid instance" in err["message"] and where in err["message"], err["message"]
        assert "text/event-stream" not in response.headers.get("content-type", "")
