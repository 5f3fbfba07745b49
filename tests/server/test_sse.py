"""Pure protocol encoding: chat chunk shapes, SSE framing (with event types), envelopes (no server)."""

from __future__ import annotations

import json

import pytest

from afm_struct.decoding.generator import Usage
from afm_struct.errors import GenerationError, OverloadedError, SchemaError
from afm_struct.turn.events import ResponseIdentity
from server import sse
from server.chat import chunks
from server.errors import validation_error

IDENT = ResponseIdentity(id="chatcmpl-abc", created=1700000000, model="m")


def _decode_event(raw: bytes) -> dict:
    assert raw.startswith(b"data: ") and raw.endswith(b"\n\n")
    body = raw[len(b"data: "):-2]
    assert b"\n" not in body  # one data line per event
    return json.loads(body)


def test_event_framing_is_one_compact_data_line() -> None:
    raw = sse.encode_event({"a": "line1\nline2", "b": "é"})
    assert raw == 'data: {"a":"line1\\nline2","b":"é"}\n\n'.encode()
    assert sse.DONE == b"data: [DONE]\n\n"


def test_named_events_carry_an_event_line() -> None:
    raw = sse.encode_event({"type": "response.created", "n": 1}, event="response.created")
    assert raw == b'event: response.created\ndata: {"type":"response.created","n":1}\n\n'
    for bad in ("", "a\nb", "a\rb"):
        with pytest.raises(ValueError):
            sse.encode_event({}, event=bad)


def test_delta_chunk_shape() -> None:
    chunk = _decode_event(sse.encode_event(chunks.delta_chunk(IDENT, {"role": "assistant", "content": "Hi"})))
    assert chunk == {"id": "chatcmpl-abc", "object": "chat.completion.chunk", "created": 1700000000,
                     "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"},
                                                "logprobs": None, "finish_reason": None}]}


def test_finish_chunk_has_empty_delta_and_reason() -> None:
    chunk = chunks.finish_chunk(IDENT, "cancelled")
    assert chunk["choices"][0]["delta"] == {}
    assert chunk["choices"][0]["finish_reason"] == "cancelled"
    assert chunk["id"] == IDENT.id and chunk["object"] == "chat.completion.chunk"


def test_usage_chunk_has_empty_choices_and_top_level_usage() -> None:
    chunk = chunks.usage_chunk(IDENT, Usage(prompt_tokens=18, completion_tokens=9))
    assert chunk["choices"] == []
    assert chunk["usage"] == {"prompt_tokens": 18, "completion_tokens": 9, "total_tokens": 27}
    assert chunk["id"] == IDENT.id and chunk["model"] == "m" and chunk["created"] == IDENT.created


def test_error_chunk_marks_error_three_ways() -> None:
    err = GenerationError("generation failed: boom")
    chunk = chunks.error_chunk(IDENT, err)
    choice = chunk["choices"][0]
    assert choice["finish_reason"] == "error"
    assert "boom" in choice["delta"]["content"]
    assert chunk["error"] == {"message": "generation failed: boom", "type": "server_error",
                              "param": None, "code": "generation_failed"}
    assert chunk["id"] == IDENT.id


def test_error_envelope_fields() -> None:
    env = sse.error_envelope(SchemaError("bad type", path="$.properties.x", param="response_format"))
    assert set(env) == {"error"}
    assert set(env["error"]) == {"message", "type", "param", "code"}
    assert env["error"]["type"] == "invalid_request_error" and env["error"]["code"] == "invalid_schema"
    assert "$.properties.x" in env["error"]["message"]
    assert sse.error_envelope(OverloadedError("busy"))["error"]["type"] == "overloaded_error"


def test_profile_event_has_no_choices() -> None:
    event = chunks.profile_event("afm_profile", {"decode_tok_s": 1.0})
    assert event == {"afm_profile": {"decode_tok_s": 1.0}}


def test_completion_body_omits_empty_channels() -> None:
    body = chunks.completion_body(IDENT, content="x", reasoning_content=None, tool_calls=None,
                               finish_reason="stop", usage=Usage(3, 4))
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "x"}
    assert body["usage"]["total_tokens"] == 7
    body = chunks.completion_body(IDENT, content="a", reasoning_content="r", tool_calls=None,
                               finish_reason="length", usage=Usage(1, 1))
    assert body["choices"][0]["message"]["reasoning_content"] == "r"


def test_cancellation_bodies() -> None:
    assert chunks.cancellation_body("r1", True) == {"id": "r1", "object": "chat.completion.cancellation",
                                                 "cancelled": True}
    from afm_struct.errors import NotFoundError

    body = chunks.cancellation_body("r2", False, NotFoundError("gone"))
    assert body["cancelled"] is False and body["error"]["type"] == "not_found_error"


def test_validation_errors_map_to_400_envelope_fields() -> None:
    err = validation_error([{"type": "json_invalid", "loc": ("body", 7), "msg": "JSON decode error",
                             "ctx": {"error": "Expecting value"}}])
    assert err.status == 400 and err.code == "invalid_json" and "position 7" in err.message
    err = validation_error([{"type": "missing", "loc": ("body", "messages"), "msg": "Field required"},
                            {"type": "x", "loc": ("body", "y"), "msg": "z"}])
    assert err.status == 400 and err.param == "messages" and err.code == "missing_required_parameter"
    assert "1 more" in err.message


def test_an_event_is_one_line_for_every_line_splitter() -> None:
    # A model's text may hold U+0085, U+2028, U+2029 (the fuzzer's qwen2 sampled U+0085):
    # str.splitlines, and httpx's iter_lines with it, would cut the event there (issue 33).
    text = "a\x85b\u2028c\u2029d\x1ce\x0bf"
    raw = sse.encode_event(chunks.delta_chunk(IDENT, {"content": text}))
    assert raw.decode().splitlines() == [raw.decode()[:-2], ""]
    assert _decode_event(raw)["choices"][0]["delta"]["content"] == text
