"""Run events → Chat Completions' wire: SSE chunks (:class:`ChatStream`) or one
``chat.completion`` body (:class:`ChatCompletion`).

Pure state machines over :mod:`afm_struct.turn.events`: no I/O, no MLX.  One chunk per
answer event (its ``delta``), the first with ``role``; asked-for logprobs ride every content and
tool-call chunk (possibly empty), never reasoning; then the finish chunk (or the error chunk,
which replaces it), the usage chunk when ``stream_options.include_usage``, the profile event,
``[DONE]``.  A call's closing is implicit in chat (the client parses arguments at the end).
"""

from __future__ import annotations

from typing import Any

from afm_struct.tools.call_deltas import ToolCallAssembler
from afm_struct.turn.events import (
    ENFORCEMENT_KEY,
    TOKEN_DETAILS_KEY,
    AnswerEvent,
    CallArguments,
    CallOpened,
    EnforcementReport,
    Entries,
    Failed,
    Finish,
    ProfileReport,
    Reasoning,
    ResponseIdentity,
    RunEnding,
    Text,
    TokenFieldsReport,
    TurnEvent,
    UsageReport,
)

from .. import sse
from ..logprob_routing import logprobs_object
from .chunks import (
    completion_body,
    delta_chunk,
    error_chunk,
    finish_chunk,
    partial_fields,
    profile_event,
    usage_chunk,
)
from .content_frames import ContentFrames

Delta = dict[str, Any]


def chat_delta(event: AnswerEvent) -> Delta | None:
    """The ``delta`` of an answer event (None: the event has none in chat, a call's closing)."""
    if isinstance(event, Text):
        return {"content": event.text}
    if isinstance(event, Reasoning):
        return {"reasoning_content": event.text}
    if isinstance(event, CallOpened):
        return {"tool_calls": [{"index": event.index, "id": event.id, "type": "function",
                                "function": {"name": event.name, "arguments": event.arguments}}]}
    if isinstance(event, CallArguments):
        return {"tool_calls": [{"index": event.index, "function": {"arguments": event.text}}]}
    return None


def _entries(event: AnswerEvent) -> Entries | None:
    return event.logprobs if isinstance(event, Text | CallOpened | CallArguments) else None


def _partial(event: AnswerEvent) -> dict[str, Any] | None:
    """The choice's AFM fields of ``event``: its partial value and its token details (None:
    it carries neither)."""
    out: dict[str, Any] = {}
    if isinstance(event, Text) and event.partial is not None:
        out = partial_fields(event.partial.value)
    elif isinstance(event, CallOpened | CallArguments) and event.partial is not None:
        out = partial_fields(event.partial.value, event.index)
    if isinstance(event, Text | CallOpened | CallArguments) and event.details is not None:
        out[TOKEN_DETAILS_KEY] = event.details
    return out or None


class ChatStream:
    """A streamed chat completion's SSE bytes, event by event.

    ``logprobs``: the request asked for them (every content / tool-call chunk then carries a
    logprobs object); ``include_usage``: the usage chunk is sent."""

    def __init__(self, ident: ResponseIdentity, *, logprobs: bool, include_usage: bool) -> None:
        self.ident = ident
        self.logprobs = logprobs
        self.include_usage = include_usage
        self._first = True  # no chunk sent yet: the next one carries the role
        self._frames = ContentFrames(ident)

    def encode(self, event: TurnEvent) -> list[bytes]:
        """The SSE events for ``event`` (possibly none)."""
        if isinstance(event, Finish | Failed):
            out = []
            if self._first:  # nothing was said: the role still opens the message
                out.append(self._chunk({"role": "assistant", "content": ""}))
            self._first = False
            end = (error_chunk(self.ident, event.error) if isinstance(event, Failed)
                   else finish_chunk(self.ident, event.reason))
            return [*out, sse.encode_event(end)]
        if isinstance(event, UsageReport):
            return [sse.encode_event(usage_chunk(self.ident, event.usage))] if self.include_usage else []
        if isinstance(event, ProfileReport):
            return [sse.encode_event(profile_event(event.key, event.report))]
        if isinstance(event, EnforcementReport):
            return [sse.encode_event({ENFORCEMENT_KEY: event.report})]
        if isinstance(event, TokenFieldsReport):
            return [sse.encode_event(event.body())]
        if type(event) is Text and not self._first and not self.logprobs and _partial(event) is None:
            frame = self._frames.frame(event.text)  # the same bytes as the whole encoding below
            if frame is not None:
                return [frame]
        delta = chat_delta(event)
        if delta is None:
            return []
        if self._first:
            delta = {"role": "assistant", **delta}
            self._first = False
        lp = None
        if self.logprobs and not isinstance(event, Reasoning):
            lp = logprobs_object(_entries(event) or [])
        return [self._chunk(delta, lp, _partial(event))]

    def end(self) -> list[bytes]:
        """What closes the stream: ``data: [DONE]``."""
        return [sse.DONE]

    def _chunk(self, delta: Delta, logprobs: dict[str, Any] | None = None,
               extension: dict[str, Any] | None = None) -> bytes:
        return sse.encode_event(delta_chunk(self.ident, delta, logprobs, extension))


class ChatCompletion:
    """A non-streamed ``chat.completion``, assembled from the run's events; a failure is raised
    (the status is not sent yet)."""

    def __init__(self, ident: ResponseIdentity, *, logprobs: bool) -> None:
        self.ident = ident
        self.logprobs = logprobs
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._calls = ToolCallAssembler()
        self._entries: Entries = []
        self._details: list[dict[str, Any]] | None = None
        self._end = RunEnding()

    def add(self, event: TurnEvent) -> None:
        """Take one event (:class:`Failed` raises its error)."""
        if self._end.take(event):
            return
        self._entries.extend(_entries(event) or ())
        if isinstance(event, Text | CallOpened | CallArguments) and event.details is not None:
            self._details = self._details or []
            self._details.extend(event.details)
        if isinstance(event, Text):
            self._content.append(event.text)
        elif isinstance(event, Reasoning):
            self._reasoning.append(event.text)
        else:
            self._calls.add_delta(chat_delta(event) or {})

    def body(self) -> dict[str, Any]:
        """The ``chat.completion`` (after the run's :class:`Finish`)."""
        reason = self._end.finished()
        content = "".join(self._content)
        body = completion_body(
            self.ident, content=content if content or not self._calls.calls else None,
            reasoning_content="".join(self._reasoning) or None,
            tool_calls=self._calls.to_list() or None,
            finish_reason=reason, usage=self._end.usage,
            logprobs=logprobs_object(self._entries) if self.logprobs else None)
        if self._end.token_fields is not None:  # token details asked for: on the choice
            body["choices"][0][TOKEN_DETAILS_KEY] = self._details or []
        return self._end.add_profile(body)

