"""Run events → the Responses API's wire: its streaming events (:class:`ResponsesStream`) or
one response object (:class:`ResponsesBody`).

A pure state machine over :mod:`afm_struct.turn.events`.  The stream opens with
``response.created`` and ``response.in_progress``; each answer part becomes an output item
(text → a ``message`` with one ``output_text`` part, reasoning → a ``reasoning`` item, a call →
a ``function_call`` or ``custom_tool_call`` item), opened by ``response.output_item.added``
(and ``response.content_part.added``), grown by its deltas and closed by its ``.done`` events,
``response.content_part.done`` and ``response.output_item.done``.  The run's end closes what
is open and ``end()`` sends one of ``response.completed``, ``response.incomplete`` (cut by
``max_output_tokens``, or cancelled) or ``response.failed`` (after an ``error`` event), with
usage.  Every event carries its ``sequence_number``.  Asked for, AFM's extension events
``afm.output_text.partial`` / ``afm.function_call_arguments.partial`` follow each delta of a
JSON answer / function call's arguments with the value parsed so far (``partial``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
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
from .custom_input import InputReader
from .shapes import (
    CUSTOM_CALL_PREFIX,
    FUNCTION_CALL_PREFIX,
    MESSAGE_PREFIX,
    REASONING_PREFIX,
    custom_call_item,
    error_object,
    function_call_item,
    logprob_list,
    message_item,
    output_text,
    reasoning_item,
    reasoning_text,
    response_object,
    usage_dict,
)

Payload = dict[str, Any]
# AFM extension events (stream_options.include_partial): the value parsed so far of the
# message's text / a function call's arguments, after the delta that grew it.
PARTIAL_TEXT = "afm.output_text.partial"
PARTIAL_ARGUMENTS = "afm.function_call_arguments.partial"
# The terminal event of each status (incomplete and cancelled: response.incomplete).
TERMINAL = {"completed": "response.completed", "failed": "response.failed"}


@dataclass
class OpenItem:
    """The output item being written: its kind, id, position and what it holds so far."""

    kind: str  # message | reasoning | function_call | custom_tool_call
    id: str
    index: int
    text: list[str] = field(default_factory=list)
    logprobs: list[dict[str, Any]] = field(default_factory=list)
    call_id: str = ""
    name: str = ""
    call_index: int = -1
    reader: InputReader | None = None


class ResponsesStream:
    """A response's events, as payloads (:meth:`events`) or SSE bytes (:meth:`encode`).

    ``echo``: the settings the response object repeats; ``custom_tools``: names whose calls are
    custom tool calls; ``new_id(prefix)`` makes item ids.  Reasoning tokens in usage are the
    generator's count (the turn's thinking phase, token by token)."""

    def __init__(self, ident: ResponseIdentity, echo: dict[str, Any], *, custom_tools: frozenset[str],
                 new_id: Callable[[str], str], clock: Callable[[], float] = time.time) -> None:
        self.ident = ident
        self.echo = echo
        self.custom_tools = custom_tools
        self.new_id = new_id
        self.clock = clock
        self.output: list[Payload] = []
        self._seq = 0
        self._open: OpenItem | None = None
        self._reasoning: list[str] = []
        self._reason: FinishReason | None = None
        self._error: AfmError | None = None
        self._usage = Usage()
        self._profile: ProfileReport | None = None
        self._enforcement: EnforcementReport | None = None
        self._started = False

    # -- the wire -------------------------------------------------------------------------------

    def start(self) -> list[bytes]:
        """``response.created`` and ``response.in_progress`` (once)."""
        return [self._sse(p) for p in self._start()]

    def encode(self, event: TurnEvent) -> list[bytes]:
        """The SSE events for ``event`` (possibly none)."""
        return [self._sse(p) for p in self.events(event)]

    def end(self) -> list[bytes]:
        """The terminal event: ``response.completed``, ``.incomplete`` or ``.failed``."""
        return [self._sse(p) for p in self._start()] + [self._sse(self.terminal())]

    @staticmethod
    def _sse(payload: Payload) -> bytes:
        return sse.encode_event(payload, event=payload["type"])

    # -- events as payloads ---------------------------------------------------------------------

    def _start(self) -> list[Payload]:
        if self._started:
            return []
        self._started = True
        shell = self.response("in_progress", output=[])
        return [self._event("response.created", response=shell),
                self._event("response.in_progress", response=shell)]

    def events(self, event: TurnEvent) -> list[Payload]:
        """The payloads ``event`` makes, in order (the opening events first, if not sent)."""
        out = self._start()
        if isinstance(event, Text):
            item = self._item(out, "message", MESSAGE_PREFIX)
            lp = logprob_list(event.logprobs)
            item.text.append(event.text)
            item.logprobs.extend(lp)
            out.append(self._event("response.output_text.delta", item_id=item.id, output_index=item.index,
                                   content_index=0, delta=event.text, logprobs=lp))
            if event.partial is not None:  # AFM extension (stream_options.include_partial)
                out.append(self._event(PARTIAL_TEXT, item_id=item.id, output_index=item.index,
                                       content_index=0, partial=event.partial.value))
        elif isinstance(event, Reasoning):
            item = self._item(out, "reasoning", REASONING_PREFIX)
            item.text.append(event.text)
            self._reasoning.append(event.text)
            out.append(self._event("response.reasoning_text.delta", item_id=item.id,
                                   output_index=item.index, content_index=0, delta=event.text))
        elif isinstance(event, CallOpened):
            self._close(out, "completed")
            custom = event.name in self.custom_tools
            item = OpenItem("custom_tool_call" if custom else "function_call",
                            self.new_id(CUSTOM_CALL_PREFIX if custom else FUNCTION_CALL_PREFIX),
                            len(self.output), call_id=event.id, name=event.name, call_index=event.index,
                            reader=InputReader() if custom else None)
            self._open = item
            out.append(self._event("response.output_item.added", output_index=item.index,
                                   item=self._call(item, "in_progress", "")))
            self._arguments(out, item, event.arguments)
            self._partial(out, item, event.partial)
        elif isinstance(event, CallArguments):
            item = self._open
            if item is not None and item.call_index == event.index:
                self._arguments(out, item, event.text)
                self._partial(out, item, event.partial)
        elif isinstance(event, CallClosed):
            if self._open is not None and self._open.call_index == event.index:
                self._close(out, "incomplete" if event.cut else "completed")
        elif isinstance(event, Finish):
            self._reason = event.reason
            self._close(out, "incomplete" if event.reason in (FinishReason.LENGTH, FinishReason.CANCELLED)
                        else "completed")
        elif isinstance(event, Failed):
            self._error = event.error
            err = event.error
            out.append(self._event("error", code=err.code or err.type, message=err.message, param=err.param))
            self._close(out, "incomplete")
        elif isinstance(event, UsageReport):
            self._usage = event.usage
        elif isinstance(event, ProfileReport):
            self._profile = event
        elif isinstance(event, EnforcementReport):
            self._enforcement = event
        return out

    def terminal(self) -> Payload:
        """The last event, with the whole response (after the run's end events)."""
        status = self.status()
        kind = TERMINAL.get(status, "response.incomplete")
        return self._event(kind, response=self.final())

    def status(self) -> str:
        """The response's status: failed, cancelled, incomplete (cut) or completed."""
        if self._error is not None:
            return "failed"
        if self._reason is FinishReason.CANCELLED:
            return "cancelled"
        if self._reason is FinishReason.LENGTH:
            return "incomplete"
        return "completed"

    def final(self) -> Payload:
        """The whole response object, as the run ended."""
        status = self.status()
        body = self.response(
            status, output=list(self.output), usage=usage_dict(self._usage, self._usage.reasoning_tokens),
            error=error_object(self._error) if self._error is not None else None,
            incomplete_reason="max_output_tokens" if status == "incomplete" else None,
            completed_at=int(self.clock()) if status == "completed" else None)
        if self._enforcement is not None:
            body[ENFORCEMENT_KEY] = self._enforcement.report
        if self._profile is not None:
            body[self._profile.key] = self._profile.report
        return body

    def response(self, status: str, **parts: Any) -> Payload:
        """The response object with ``status`` and the given parts."""
        return response_object(self.ident, self.echo, status=status, **parts)

    # -- items ----------------------------------------------------------------------------------

    def _event(self, kind: str, **fields: Any) -> Payload:
        payload = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return payload

    def _item(self, out: list[Payload], kind: str, prefix: str) -> OpenItem:
        """The open item of ``kind``, opening one (and closing another) as needed."""
        if self._open is not None and self._open.kind == kind:
            return self._open
        self._close(out, "completed")
        item = OpenItem(kind, self.new_id(prefix), len(self.output))
        self._open = item
        if kind == "message":
            out.append(self._event("response.output_item.added", output_index=item.index,
                                   item=message_item(item.id, "in_progress", [])))
            out.append(self._event("response.content_part.added", item_id=item.id, output_index=item.index,
                                   content_index=0, part=output_text("")))
        else:
            out.append(self._event("response.output_item.added", output_index=item.index,
                                   item=reasoning_item(item.id, "in_progress", [])))
            out.append(self._event("response.content_part.added", item_id=item.id, output_index=item.index,
                                   content_index=0, part=reasoning_text("")))
        return item

    def _call(self, item: OpenItem, status: str, value: str) -> Payload:
        maker = custom_call_item if item.kind == "custom_tool_call" else function_call_item
        return maker(item.id, status, item.call_id, item.name, value)

    def _arguments(self, out: list[Payload], item: OpenItem, text: str) -> None:
        if not text:
            return
        if item.reader is not None:
            piece = item.reader.feed(text)
            if piece:
                item.text.append(piece)
                out.append(self._event("response.custom_tool_call_input.delta", item_id=item.id,
                                       output_index=item.index, delta=piece))
            return
        item.text.append(text)
        out.append(self._event("response.function_call_arguments.delta", item_id=item.id,
                               output_index=item.index, delta=text))

    def _partial(self, out: list[Payload], item: OpenItem, partial: Partial | None) -> None:
        """A function call's arguments so far (AFM extension; a custom call's input is a string
        the reader decodes, not a JSON value: none)."""
        if partial is not None and item.reader is None:
            out.append(self._event(PARTIAL_ARGUMENTS, item_id=item.id, output_index=item.index,
                                   partial=partial.value))

    def _close(self, out: list[Payload], status: str) -> None:
        """Close the open item (its done events), recording it in :attr:`output`."""
        item, self._open = self._open, None
        if item is None:
            return
        common = {"item_id": item.id, "output_index": item.index}
        text = "".join(item.text)
        if item.kind == "message":
            part = output_text(text, item.logprobs)
            done = message_item(item.id, status, [part])
            out.append(self._event("response.output_text.done", **common, content_index=0, text=text,
                                   logprobs=item.logprobs))
            out.append(self._event("response.content_part.done", **common, content_index=0, part=part))
        elif item.kind == "reasoning":
            part = reasoning_text(text)
            done = reasoning_item(item.id, status, [part])
            out.append(self._event("response.reasoning_text.done", **common, content_index=0, text=text))
            out.append(self._event("response.content_part.done", **common, content_index=0, part=part))
        elif item.reader is not None:
            whole, rest = item.reader.close()
            if rest:
                out.append(self._event("response.custom_tool_call_input.delta", **common, delta=rest))
            done = self._call(item, status, whole)
            out.append(self._event("response.custom_tool_call_input.done", **common, input=whole))
        else:
            done = self._call(item, status, text)
            out.append(self._event("response.function_call_arguments.done", **common, name=item.name,
                                   arguments=text))
        out.append(self._event("response.output_item.done", output_index=item.index, item=done))
        self.output.append(done)


class ResponsesBody:
    """A non-streamed response: the same state machine, its events dropped; a failure is
    raised (the status is not sent yet)."""

    def __init__(self, stream: ResponsesStream) -> None:
        self.stream = stream

    def add(self, event: TurnEvent) -> None:
        """Take one event (:class:`Failed` raises its error)."""
        if isinstance(event, Failed):
            raise event.error
        self.stream.events(event)

    def body(self) -> dict[str, Any]:
        """The response object (after the run's end events)."""
        return self.stream.final()
