"""The chat encoder on its own: run events → chunk dicts and the chat.completion body (no server).

The capture test (test_wire_capture.py) holds the bytes over HTTP; these pin the rules the
encoder applies to each event, so a new protocol's encoder has a model to follow.
"""

from __future__ import annotations

import json

import pytest

from afm_struct.errors import GenerationError
from afm_struct.turn.events import (
    CallArguments,
    CallClosed,
    CallOpened,
    Failed,
    Finish,
    ProfileReport,
    Reasoning,
    ResponseIdentity,
    Text,
    UsageReport,
)
from afm_struct.turn.outputs import FinishReason, TokenLogprob, Usage
from server.chat.encoder import ChatCompletion, ChatStream, chat_delta

IDENT = ResponseIdentity(id="chatcmpl-1", created=1700000000, model="m")


def _entry(token: str) -> TokenLogprob:
    return TokenLogprob(token=token, id=1, logprob=-0.5, bytes=tuple(token.encode()), top=())


def _chunks(frames: list[bytes]) -> list[dict]:
    out = []
    for frame in frames:
        assert frame.startswith(b"data: ") and frame.endswith(b"\n\n")
        payload = frame[len(b"data: "):-2]
        out.append(payload.decode() if payload == b"[DONE]" else json.loads(payload))
    return out


def _stream(events, *, logprobs=False, include_usage=False) -> list:
    enc = ChatStream(IDENT, logprobs=logprobs, include_usage=include_usage)
    frames = [f for e in events for f in enc.encode(e)] + enc.end()
    return _chunks(frames)


def test_the_first_chunk_carries_the_role_and_a_call_closing_sends_nothing() -> None:
    chunks = _stream([Reasoning("hm"), Text("a"), CallOpened(0, "call_1", "f", '{"x"'),
                      CallArguments(0, ": 1}"), CallClosed(0), Finish(FinishReason.TOOL_CALLS),
                      UsageReport(Usage(3, 4))])
    deltas = [c["choices"][0]["delta"] for c in chunks[:-2]]
    assert deltas == [{"role": "assistant", "reasoning_content": "hm"}, {"content": "a"},
                      {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                       "function": {"name": "f", "arguments": '{"x"'}}]},
                      {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}]
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1] == "[DONE]"  # no usage chunk: include_usage is off


def test_an_empty_answer_still_opens_with_the_role_before_its_finish() -> None:
    chunks = _stream([Finish(FinishReason.STOP), UsageReport(Usage(1, 0))], include_usage=True)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[1]["choices"][0]["finish_reason"] == "stop"
    assert chunks[2]["choices"] == [] and chunks[2]["usage"]["total_tokens"] == 1
    assert chunks[3] == "[DONE]"


def test_logprobs_ride_text_and_call_chunks_never_reasoning() -> None:
    chunks = _stream([Reasoning("r"), Text("a", [_entry("a")]), CallOpened(0, "c", "f", "", []),
                      Finish(FinishReason.STOP)], logprobs=True)
    assert chunks[0]["choices"][0]["logprobs"] is None
    assert [e["token"] for e in chunks[1]["choices"][0]["logprobs"]["content"]] == ["a"]
    assert chunks[2]["choices"][0]["logprobs"] == {"content": [], "refusal": None}


def test_a_failure_replaces_the_finish_chunk_and_the_profile_comes_last() -> None:
    chunks = _stream([Text("a"), Failed(GenerationError("boom")), UsageReport(Usage(1, 1)),
                      ProfileReport("afm_profile", {"k": 1})], include_usage=True)
    assert chunks[1]["choices"][0]["finish_reason"] == "error" and "boom" in chunks[1]["error"]["message"]
    assert "usage" in chunks[2]
    assert chunks[3] == {"afm_profile": {"k": 1}} and chunks[4] == "[DONE]"


def test_the_body_assembles_channels_calls_and_logprobs() -> None:
    enc = ChatCompletion(IDENT, logprobs=True)
    for event in [Reasoning("think"), Text("x", [_entry("x")]), CallOpened(0, "call_1", "f", "{"),
                  CallArguments(0, "}", [_entry("}")]), CallClosed(0), Finish(FinishReason.TOOL_CALLS),
                  UsageReport(Usage(2, 3)), ProfileReport("afm_profile", {"k": 1})]:
        enc.add(event)
    body = enc.body()
    message = body["choices"][0]["message"]
    assert message == {"role": "assistant", "content": "x", "reasoning_content": "think",
                       "tool_calls": [{"id": "call_1", "type": "function",
                                       "function": {"name": "f", "arguments": "{}"}}]}
    assert [e["token"] for e in body["choices"][0]["logprobs"]["content"]] == ["x", "}"]
    assert body["usage"]["total_tokens"] == 5 and body["afm_profile"] == {"k": 1}


def test_a_body_with_only_calls_has_null_content_and_a_failure_raises() -> None:
    enc = ChatCompletion(IDENT, logprobs=False)
    for event in [CallOpened(0, "call_1", "f", "{}"), Finish(FinishReason.TOOL_CALLS)]:
        enc.add(event)
    assert enc.body()["choices"][0]["message"]["content"] is None
    with pytest.raises(GenerationError):
        ChatCompletion(IDENT, logprobs=False).add(Failed(GenerationError("boom")))


def test_every_answer_event_but_a_closing_has_a_delta() -> None:
    assert chat_delta(CallClosed(3)) is None
    assert chat_delta(Text("")) == {"content": ""}
