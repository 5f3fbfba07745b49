"""The pure stream assembler of afm_struct.client: the contract's client rules, no I/O."""

from __future__ import annotations

import json

import pytest

from afm_struct.client import (
    AfmProtocolError,
    AfmStreamError,
    SSEDecoder,
    StreamAssembler,
    build_request,
)
from afm_struct.client import __all__ as client_all


def _chunk(delta=None, finish=None, cid="chatcmpl-1", **top) -> str:
    choices = [] if delta is None and finish is None else [
        {"index": 0, "delta": delta or {}, "finish_reason": finish}]
    return json.dumps({"id": cid, "object": "chat.completion.chunk", "created": 1, "model": "m",
                       "choices": choices, **top})


def _sse(*payloads: str) -> str:
    return "".join(f"data: {p}\n\n" for p in payloads)


def test_all_is_sorted() -> None:
    assert list(client_all) == sorted(client_all)


def test_decoder_handles_any_fragmentation_and_crlf() -> None:
    text = "data: a\r\n\r\n: comment\n\ndata: b\ndata: c\n\nevent: x\ndata: d\n\n"
    for size in (1, 2, 3, 7, len(text)):
        dec = SSEDecoder()
        out = []
        for i in range(0, len(text), size):
            out += dec.feed(text[i:i + size])
        assert out == ["a", "b\nc", "d"], size


def test_order_channels_usage_and_done() -> None:
    asm = StreamAssembler()
    stream = _sse(_chunk({"role": "assistant", "reasoning_content": "think "}),
                  _chunk({"reasoning_content": "more"}),
                  _chunk({"content": "Hel"}), _chunk({"content": "lo"}),
                  _chunk({}, "stop"),
                  _chunk(usage={"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}),
                  "[DONE]")
    events = []
    for i in range(0, len(stream), 5):
        events += asm.feed_text(stream[i:i + 5])
    kinds = [e.kind for e in events]
    assert kinds == ["delta", "delta", "delta", "delta", "finish", "usage", "done"]
    r = asm.close()
    assert (r.role, r.content, r.reasoning_content) == ("assistant", "Hello", "think more")
    assert r.finish_reason == "stop" and r.usage["total_tokens"] == 5 and r.id == "chatcmpl-1"


def test_tool_calls_merge_by_index_keeping_first_non_null_fields() -> None:
    asm = StreamAssembler()
    asm.feed_text(_sse(
        _chunk({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                                "function": {"name": "read_file", "arguments": "{\"pa"}}]}),
        _chunk({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                                "function": {"name": "ls", "arguments": ""}}]}),
        _chunk({"tool_calls": [{"index": 0, "id": None, "function": {"name": None,
                                                                     "arguments": "th\":\"README.md\"}"}}]}),
        _chunk({"tool_calls": [{"index": 1, "id": "call_zzz",
                                "function": {"name": "rm", "arguments": "{}"}}]}),
        _chunk({}, "tool_calls"), "[DONE]"))
    r = asm.close()
    assert [c.to_dict() for c in r.tool_calls] == [
        {"id": "call_a", "type": "function",
         "function": {"name": "read_file", "arguments": '{"path":"README.md"}'}},
        {"id": "call_b", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]
    assert json.loads(r.tool_calls[0].arguments) == {"path": "README.md"}
    assert r.finish_reason == "tool_calls"


def test_profile_events_are_dispatched_before_chunk_decoding() -> None:
    asm = StreamAssembler()
    events = asm.feed_text(_sse(_chunk({"content": "x"}), _chunk({}, "stop"),
                                json.dumps({"afm_profile_extended": {"summary": {}, "samples": []}}),
                                "[DONE]"))
    assert [e.kind for e in events] == ["delta", "finish", "profile", "done"]
    assert events[2].profile_key == "afm_profile_extended"
    assert asm.result.profile == {"summary": {}, "samples": []} and asm.result.content == "x"


def test_error_chunk_is_detected_and_kept_out_of_content() -> None:
    asm = StreamAssembler()
    err = {"message": "boom", "type": "server_error", "param": None, "code": "generation_failed"}
    asm.feed_text(_sse(_chunk({"content": "partial"}),
                       _chunk({"content": "[error] boom"}, "error", error=err), "[DONE]"))
    r = asm.close()
    assert r.error == err and r.finish_reason == "error" and r.content == "partial"
    with pytest.raises(AfmStreamError) as exc:
        r.raise_for_error()
    assert exc.value.code == "generation_failed"


def test_protocol_violations_raise() -> None:
    asm = StreamAssembler()
    asm.feed_text(_sse(_chunk({"content": "x"})))
    with pytest.raises(AfmProtocolError, match="DONE"):
        asm.close()  # the body ended without [DONE]
    asm = StreamAssembler()
    with pytest.raises(AfmProtocolError, match="differs"):
        asm.feed_text(_sse(_chunk({"content": "a"}), _chunk({"content": "b"}, cid="chatcmpl-2")))
    asm = StreamAssembler()
    asm.feed_text(_sse("[DONE]"))
    with pytest.raises(AfmProtocolError, match="after"):
        asm.feed_text(_sse(_chunk({"content": "late"})))
    with pytest.raises(AfmProtocolError, match="not JSON"):
        StreamAssembler().feed_text(_sse("{nope"))


def test_build_request() -> None:
    body, headers = build_request([{"role": "user", "content": "x"}], stream=True, request_id="r1",
                                  profile="extended", max_tokens=5)
    assert body == {"messages": [{"role": "user", "content": "x"}], "stream": True, "max_tokens": 5}
    assert headers == {"X-Request-ID": "r1", "X-AFM-Profile": "extended"}
