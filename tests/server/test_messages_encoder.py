"""The Messages encoder on any run: random event sequences (hypothesis) give Anthropic's event
grammar, and the streamed events rebuild exactly the message the body encoder returns."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from afm_struct.errors import GenerationError
from afm_struct.turn.events import (
    CallArguments,
    CallClosed,
    CallOpened,
    Failed,
    Finish,
    Reasoning,
    ResponseIdentity,
    Text,
    UsageReport,
)
from afm_struct.turn.outputs import FinishReason, Usage
from server.messages.encoder import MessagesBody, MessagesStream, stop_reason

IDENT = ResponseIdentity(id="msg_1", created=0, model="m")
texts = st.text(min_size=0, max_size=6)


@st.composite
def answers(draw: Any) -> list[Any]:
    """Text and reasoning pieces and whole calls (their arguments cut anywhere), in any order."""
    events: list[Any] = []
    calls = 0
    for kind in draw(st.lists(st.sampled_from(["text", "reasoning", "call"]), max_size=8)):
        if kind == "text":
            events.append(Text(draw(texts)))
        elif kind == "reasoning":
            events.append(Reasoning(draw(texts)))
        else:
            arguments = json.dumps({"city": draw(texts)})
            cut = draw(st.integers(0, len(arguments)))
            events += [CallOpened(calls, f"call_{calls}", "get_weather", arguments[:cut]),
                       CallArguments(calls, arguments[cut:]), CallClosed(calls)]
            calls += 1
    return events


def rebuild(payloads: list[dict[str, Any]]) -> dict[str, Any]:
    """The message Anthropic's event grammar builds (asserting the grammar on the way)."""
    kinds = [p["type"] for p in payloads]
    assert kinds[:2] == ["message_start", "ping"] and kinds[-2:] == ["message_delta", "message_stop"]
    message = payloads[0]["message"]
    assert message["content"] == [] and message["stop_reason"] is None
    content: list[dict[str, Any]] = []
    partial = ""
    open_index = None
    for p in payloads[2:-2]:
        if p["type"] == "content_block_start":
            assert open_index is None and p["index"] == len(content)
            open_index, partial = p["index"], ""
            content.append(dict(p["content_block"]))
        elif p["type"] == "content_block_delta":
            assert p["index"] == open_index
            block, delta = content[open_index], p["delta"]
            if delta["type"] == "text_delta":
                assert delta["text"] and block["type"] == "text"
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                assert delta["thinking"] and block["type"] == "thinking"
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "input_json_delta":
                assert block["type"] == "tool_use"
                partial += delta["partial_json"]
            else:
                assert delta["type"] == "signature_delta" and block["type"] == "thinking"
        else:
            assert p["type"] == "content_block_stop" and p["index"] == open_index
            if content[open_index]["type"] == "tool_use":
                content[open_index]["input"] = json.loads(partial)
            open_index = None
    assert open_index is None
    delta = payloads[-2]
    message.update(content=content, stop_reason=delta["delta"]["stop_reason"],
                   stop_sequence=delta["delta"]["stop_sequence"])
    message["usage"]["output_tokens"] = delta["usage"]["output_tokens"]
    return message


@settings(max_examples=200, deadline=None)
@given(answers(), st.sampled_from([FinishReason.STOP, FinishReason.LENGTH, FinishReason.TOOL_CALLS,
                                   FinishReason.CANCELLED]), st.sampled_from([None, "END"]))
def test_streamed_events_rebuild_the_message(events: list[Any], reason: FinishReason,
                                              stop: str | None) -> None:
    ending = [Finish(reason, stop=stop), UsageReport(Usage(prompt_tokens=7, completion_tokens=5))]
    stream = MessagesStream(IDENT, input_tokens=7)
    payloads = [p for event in events + ending for p in stream.events(event)] + stream.closing()
    body_encoder = MessagesBody(MessagesStream(IDENT, input_tokens=7))
    for event in events + ending:
        body_encoder.add(event)
    body = body_encoder.body()
    assert rebuild(payloads) == body
    assert body["stop_reason"] == stop_reason(reason, stop)
    assert body["stop_sequence"] == (stop if reason is FinishReason.STOP else None)
    assert body["usage"] == {"input_tokens": 7, "cache_creation_input_tokens": 0,
                             "cache_read_input_tokens": 0, "output_tokens": 5}
    assert all(block.get("text") or block.get("thinking") or block["type"] == "tool_use"
               for block in body["content"])  # no empty text or thinking block


@pytest.mark.parametrize(("reason", "stop", "expected"), [
    (FinishReason.STOP, None, "end_turn"), (FinishReason.STOP, "##", "stop_sequence"),
    (FinishReason.LENGTH, None, "max_tokens"), (FinishReason.TOOL_CALLS, None, "tool_use"),
    (FinishReason.CANCELLED, None, "cancelled"),
])
def test_stop_reasons(reason, stop, expected) -> None:
    assert stop_reason(reason, stop) == expected


def test_a_failure_is_an_error_event_and_ends_the_stream() -> None:
    stream = MessagesStream(IDENT, input_tokens=3)
    payloads = stream.events(Text("Hi")) + stream.events(Failed(GenerationError("boom")))
    assert [p["type"] for p in payloads] == ["message_start", "ping", "content_block_start",
                                             "content_block_delta", "content_block_stop", "error"]
    assert payloads[-1] == {"type": "error", "error": {"type": "api_error", "message": "boom"}}
    assert stream.closing() == []
    body = MessagesBody(MessagesStream(IDENT, input_tokens=3))
    with pytest.raises(GenerationError):
        body.add(Failed(GenerationError("boom")))
