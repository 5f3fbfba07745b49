"""Run events → Anthropic's Messages wire: its SSE events (:class:`MessagesStream`) or one
message object (:class:`MessagesBody`).

A pure state machine over :mod:`afm_struct.turn.events`, in Anthropic's order: the stream
opens with ``message_start`` (the message with no content, its input tokens known) and a
``ping``; each answer part is a content block (text → ``text``, reasoning → ``thinking``, a call
→ ``tool_use``) opened by ``content_block_start``, grown by ``content_block_delta`` events
(``text_delta``, ``thinking_delta``, ``input_json_delta``; a thinking block ends with a
``signature_delta``, empty: this server signs nothing) and closed by ``content_block_stop``; then
``message_delta`` (``stop_reason``, ``stop_sequence``, the output tokens) and ``message_stop``.  A
failure after the status is sent is an ``error`` event, and the stream ends there.

Stop reasons: ``end_turn`` (the model ended, or a grammar finished), ``stop_sequence`` (with
the sequence), ``max_tokens``, ``tool_use``; a cancelled run (by request ID or a disconnect)
ends with ``cancelled``, this server's own value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from afm_struct.errors import AfmError
from afm_struct.turn.events import (
    ENFORCEMENT_KEY,
    CallArguments,
    CallClosed,
    CallOpened,
    EnforcementReport,
    Failed,
    Finish,
    Partial,
    ProfileReport,
    Reasoning,
    ResponseIdentity,
    Text,
    TurnEvent,
    UsageReport,
)
from afm_struct.turn.outputs import FinishReason, Usage

from .. import sse
from .errors import anthropic_error

Payload = dict[str, Any]
# AFM's extension event (X-AFM-Partial): a content block's value so far, after its delta.
PARTIAL_EVENT = "afm_partial"
STOP_REASONS = {FinishReason.LENGTH: "max_tokens", FinishReason.TOOL_CALLS: "tool_use",
                FinishReason.CANCELLED: "cancelled"}


def stop_reason(reason: FinishReason | None, stop: str | None) -> str | None:
    """Anthropic's ``stop_reason`` for the run's finish reason (and the stop sequence)."""
    if reason is None:
        return None
    if reason in STOP_REASONS:
        return STOP_REASONS[reason]
    return "stop_sequence" if stop is not None else "end_turn"


def usage_dict(usage: Usage, input_tokens: int) -> Payload:
    """Anthropic's usage: every prompt token is an input token (the prefix cache is not
    Anthropic's prompt caching: nothing is written or read as cache tokens)."""
    return {"input_tokens": input_tokens, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
            "output_tokens": usage.completion_tokens}


@dataclass
class Block:
    """The content block being written: its kind, position and what it holds so far."""

    kind: str  # text | thinking | tool_use
    index: int
    text: list[str] = field(default_factory=list)
    id: str = ""
    name: str = ""
    call_index: int = -1


class MessagesStream:
    """A message's events, as payloads (:meth:`events`) or SSE bytes (:meth:`encode`).

    ``input_tokens``: the prompt's tokens (known before the first token, sent in
    ``message_start``)."""

    def __init__(self, ident: ResponseIdentity, *, input_tokens: int) -> None:
        self.ident = ident
        self.input_tokens = input_tokens
        self.content: list[Payload] = []
        self._open: Block | None = None
        self._reason: FinishReason | None = None
        self._stop: str | None = None
        self._error: AfmError | None = None
        self._usage = Usage(prompt_tokens=input_tokens)
        self._profile: ProfileReport | None = None
        self._enforcement: EnforcementReport | None = None
        self._started = False

    # -- the wire -------------------------------------------------------------------------------

    def start(self) -> list[bytes]:
        """``message_start`` and a ``ping`` (once)."""
        return [self._sse(p) for p in self._start()]

    def encode(self, event: TurnEvent) -> list[bytes]:
        """The SSE events for ``event`` (possibly none)."""
        return [self._sse(p) for p in self.events(event)]

    def end(self) -> list[bytes]:
        """``message_delta`` and ``message_stop``; nothing more after an ``error`` event."""
        return [self._sse(p) for p in self._start() + self.closing()]

    @staticmethod
    def _sse(payload: Payload) -> bytes:
        return sse.encode_event(payload, event=payload["type"])

    # -- events as payloads ---------------------------------------------------------------------

    def _start(self) -> list[Payload]:
        if self._started:
            return []
        self._started = True
        shell = self.message(content=[], reason=None, stop=None, output_tokens=0)
        return [{"type": "message_start", "message": shell}, {"type": "ping"}]

    def events(self, event: TurnEvent) -> list[Payload]:
        """The payloads ``event`` makes, in order (the opening events first, if not sent)."""
        out = self._start()
        if isinstance(event, Text):
            if event.text:
                block = self._block(out, "text")
                block.text.append(event.text)
                out.append(self._delta(block, {"type": "text_delta", "text": event.text}))
                self._partial(out, block, event.partial)
        elif isinstance(event, Reasoning):
            if event.text:
                block = self._block(out, "thinking")
                block.text.append(event.text)
                out.append(self._delta(block, {"type": "thinking_delta", "thinking": event.text}))
        elif isinstance(event, CallOpened):
            self._close(out)
            block = Block("tool_use", len(self.content), id=event.id, name=event.name,
                          call_index=event.index)
            self._open = block
            start = {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}
            out.append({"type": "content_block_start", "index": block.index, "content_block": start})
            self._arguments(out, block, event.arguments)
            self._partial(out, block, event.partial)
        elif isinstance(event, CallArguments):
            if self._open is not None and self._open.call_index == event.index:
                self._arguments(out, self._open, event.text)
                self._partial(out, self._open, event.partial)
        elif isinstance(event, CallClosed):
            if self._open is not None and self._open.call_index == event.index:
                self._close(out)
        elif isinstance(event, Finish):
            self._reason, self._stop = event.reason, event.stop
            self._close(out)
        elif isinstance(event, Failed):
            self._error = event.error
            self._close(out)
            out.append(anthropic_error(event.error))
        elif isinstance(event, UsageReport):
            self._usage = event.usage
        elif isinstance(event, ProfileReport):
            self._profile = event
        elif isinstance(event, EnforcementReport):
            self._enforcement = event
            out.append({"type": ENFORCEMENT_KEY, ENFORCEMENT_KEY: event.report})
        return out

    @staticmethod
    def _partial(out: list[Payload], block: Block, partial: Partial | None) -> None:
        """AFM's extension event after a delta (``X-AFM-Partial``): the block's value so far, a
        JSON answer's or a tool_use block's input."""
        if partial is not None:
            out.append({"type": PARTIAL_EVENT, "index": block.index, "partial": partial.value})

    def closing(self) -> list[Payload]:
        """``message_delta`` and ``message_stop`` (none after a failure: its ``error`` ended it)."""
        if self._error is not None:
            return []
        return [{"type": "message_delta",
                 "delta": {"stop_reason": stop_reason(self._reason, self._stop),
                           "stop_sequence": self._stop_sequence()},
                 "usage": {"output_tokens": self._usage.completion_tokens}},
                {"type": "message_stop"}]

    def final(self) -> Payload:
        """The whole message, as the run ended."""
        body = self.message(content=list(self.content), reason=stop_reason(self._reason, self._stop),
                            stop=self._stop_sequence(), output_tokens=self._usage.completion_tokens)
        if self._enforcement is not None:
            body[ENFORCEMENT_KEY] = self._enforcement.report
        if self._profile is not None:
            body[self._profile.key] = self._profile.report
        return body

    def message(self, *, content: list[Payload], reason: str | None, stop: str | None,
                output_tokens: int) -> Payload:
        """The message object with the given parts."""
        usage = usage_dict(Usage(completion_tokens=output_tokens), self.input_tokens)
        return {"id": self.ident.id, "type": "message", "role": "assistant", "model": self.ident.model,
                "content": content, "stop_reason": reason, "stop_sequence": stop, "usage": usage}

    def _stop_sequence(self) -> str | None:
        return self._stop if self._reason is FinishReason.STOP else None

    # -- blocks ---------------------------------------------------------------------------------

    def _block(self, out: list[Payload], kind: str) -> Block:
        """The open block of ``kind``, opening one (and closing another) as needed."""
        if self._open is not None and self._open.kind == kind:
            return self._open
        self._close(out)
        block = Block(kind, len(self.content))
        self._open = block
        start = {"type": "text", "text": ""} if kind == "text" else {"type": "thinking", "thinking": "",
                                                                     "signature": ""}
        out.append({"type": "content_block_start", "index": block.index, "content_block": start})
        return block

    @staticmethod
    def _delta(block: Block, delta: Payload) -> Payload:
        return {"type": "content_block_delta", "index": block.index, "delta": delta}

    def _arguments(self, out: list[Payload], block: Block, text: str) -> None:
        if text:
            block.text.append(text)
            out.append(self._delta(block, {"type": "input_json_delta", "partial_json": text}))

    def _close(self, out: list[Payload]) -> None:
        """Close the open block (its last events), recording it in :attr:`content`."""
        block, self._open = self._open, None
        if block is None:
            return
        text = "".join(block.text)
        if block.kind == "text":
            done: Payload = {"type": "text", "text": text}
        elif block.kind == "thinking":
            out.append(self._delta(block, {"type": "signature_delta", "signature": ""}))
            done = {"type": "thinking", "thinking": text, "signature": ""}
        else:
            done = {"type": "tool_use", "id": block.id, "name": block.name, "input": tool_input(text)}
        out.append({"type": "content_block_stop", "index": block.index})
        self.content.append(done)


def tool_input(arguments: str) -> Any:
    """A call's arguments text as its ``input`` object (``{}`` when a cut left it unparsable: the
    stop reason, ``max_tokens``, says it was cut)."""
    try:
        value = json.loads(arguments) if arguments else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class MessagesBody:
    """A non-streamed message: the same state machine, its events dropped; a failure is raised
    (the status is not sent yet)."""

    def __init__(self, stream: MessagesStream) -> None:
        self.stream = stream

    def add(self, event: TurnEvent) -> None:
        """Take one event (:class:`Failed` raises its error)."""
        if isinstance(event, Failed):
            raise event.error
        self.stream.events(event)

    def body(self) -> dict[str, Any]:
        """The message object (after the run's end events)."""
        return self.stream.final()
