"""The tool-call seam: an AnswerRouter that emits tool-call events flows through both paths.

This plugs a toy turn into admission's ``make_router`` (the request's turn, which the generator
feeds and whose events ride its deltas) to pin down the wire shape the chat
encoder produces for its events (deltas by index, ``finish_reason: "tool_calls"``, merged calls
in non-streaming responses) and that the client assembles it.
"""

from __future__ import annotations

import httpx
import pytest

from afm_struct.client import Client
from afm_struct.turn.events import CallArguments, CallClosed, CallOpened
from server import admission

from .conftest import USER, decode, stream_raw


class ToyToolRouter:
    """Text 'name|args-fragment;...' → one tool call per name, arguments streamed in pieces."""

    def __init__(self, **_: object) -> None:
        self.index = -1
        self.buf = ""

    def feed(self, text: str) -> list:
        out: list = []
        self.buf += text
        while ";" in self.buf:
            piece, self.buf = self.buf.split(";", 1)
            name, frag = piece.strip().split("|", 1)
            if name:
                if self.index >= 0:
                    out.append(CallClosed(self.index))
                self.index += 1
                out.append(CallOpened(self.index, f"call_{self.index}", name, arguments=frag))
            else:
                out.append(CallArguments(self.index, frag))
        return out

    def finish(self) -> list:
        return [CallClosed(self.index)] if self.index >= 0 else []

    def finish_reason(self, reason: str, *, whole: bool = False) -> str:
        return "tool_calls" if self.index >= 0 and reason == "stop" else reason

    # What the generator reads of a turn besides its events: where the model is (this format
    # has no thinking block; the generator counts reasoning tokens and gates masks by it).
    phase = "content"
    # A turn whose calls reach max_tool_calls ends there; this format has no such limit.
    calls_exhausted = False

    # What the generator tells a turn besides its text (held stop text, hidden tokens, a stop).
    def hold(self, held: str) -> None:
        pass

    def unseen(self, text: str) -> None:
        pass

    def stop(self) -> None:
        pass


SCRIPT = 'read_file|{"pa;|th": "a.md"};ls|{};|'
EXPECTED = [
    {"id": "call_0", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.md"}'}},
    {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]


@pytest.fixture
def tool_server(serve, monkeypatch):
    monkeypatch.setattr(admission, "make_router", ToyToolRouter)
    return serve(SCRIPT)


def test_streamed_tool_call_deltas_and_finish_reason(tool_server) -> None:
    _, payloads = stream_raw(tool_server.url, {"messages": USER})
    events = decode(payloads)
    deltas = [e["choices"][0]["delta"] for e in events]
    assert deltas[0]["role"] == "assistant" and deltas[0]["tool_calls"][0]["index"] == 0
    assert [d["tool_calls"][0]["index"] for d in deltas if "tool_calls" in d] == [0, 0, 1]
    assert events[-1]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None,
                                        "finish_reason": "tool_calls"}
    with Client(tool_server.url) as client:
        result = client.chat(USER)
    assert [c.to_dict() for c in result.tool_calls] == EXPECTED
    assert result.finish_reason == "tool_calls" and result.content == ""


def test_non_streaming_merges_tool_calls(tool_server) -> None:
    body = httpx.post(f"{tool_server.url}/v1/chat/completions", json={"messages": USER}).json()
    message = body["choices"][0]["message"]
    assert body["choices"][0]["finish_reason"] == "tool_calls"
    assert message["content"] is None
    assert message["tool_calls"] == EXPECTED
