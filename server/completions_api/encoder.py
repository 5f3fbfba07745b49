"""Run events → the legacy ``text_completion`` wire: SSE chunks (:class:`CompletionStream`) or
one body (:class:`TextCompletion`).

Pure state machines over :mod:`afm_struct.turn.events`: no I/O, no MLX.  Every chunk is a
whole ``text_completion`` object with one choice carrying a piece of ``text`` (and its
``logprobs`` in the legacy shape when asked for); then the finish chunk (or the error chunk,
which replaces it), the usage chunk when ``stream_options.include_usage``, the profile event,
``[DONE]``.  A raw prompt has no thinking block and no tools, so only text reaches here; any
other answer event would be the engine's text all the same and is written as text.
"""

from __future__ import annotations

from typing import Any

from afm_struct.errors import AfmError
from afm_struct.turn.events import (
    CallArguments,
    CallOpened,
    Entries,
    Failed,
    Finish,
    ProfileReport,
    Reasoning,
    ResponseIdentity,
    RunEnding,
    Text,
    TurnEvent,
    UsageReport,
)
from afm_struct.turn.outputs import FinishReason

from .. import sse
from ..chat.chunks import profile_event, usage_dict
from ..sse import error_body

OBJECT = "text_completion"
ID_PREFIX = "cmpl-"
CANCELLATION_OBJECT = "text_completion.cancellation"


def legacy_logprobs(entries: Entries, base: int) -> dict[str, Any]:
    """OpenAI's legacy ``logprobs``: parallel lists of the tokens, their logprobs, the
    alternatives (``{token: logprob}``, the sampled token always among them) and each token's
    character offset in the choice's text (``base``: where the generated text starts there)."""
    tops = []
    for e in entries:
        top = {alt.token: alt.logprob for alt in e.top}
        top.setdefault(e.token, e.logprob)
        tops.append(top)
    return {"tokens": [e.token for e in entries], "token_logprobs": [e.logprob for e in entries],
            "top_logprobs": tops, "text_offset": [base + e.offset for e in entries]}


def _text(event: TurnEvent) -> tuple[str, Entries | None] | None:
    if isinstance(event, Text):
        return event.text, event.logprobs
    if isinstance(event, Reasoning):
        return event.text, None
    if isinstance(event, CallOpened):
        return event.arguments, event.logprobs
    if isinstance(event, CallArguments):
        return event.text, event.logprobs
    return None


def completion_chunk(ident: ResponseIdentity, text: str, *, logprobs: dict[str, Any] | None = None,
                     finish_reason: FinishReason | None = None) -> dict[str, Any]:
    """One streamed ``text_completion`` object: a piece of text, or the finish."""
    return {"id": ident.id, "object": OBJECT, "created": ident.created, "model": ident.model,
            "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}]}


def error_chunk(ident: ResponseIdentity, err: AfmError) -> dict[str, Any]:
    """A mid-stream failure: the message in ``text`` (plain clients show it), a top-level
    ``error`` object (the openai SDK raises it) and finish_reason "error"."""
    chunk = completion_chunk(ident, f"[error] {err.message}", finish_reason=FinishReason.ERROR)
    chunk["error"] = error_body(err)
    return chunk


def cancellation_body(request_id: str, cancelled: bool, err: AfmError | None = None) -> dict[str, Any]:
    """The body of ``POST /v1/completions/{id}/cancel`` (404s also carry the error envelope)."""
    body: dict[str, Any] = {"id": request_id, "object": CANCELLATION_OBJECT, "cancelled": cancelled}
    if err is not None:
        body["error"] = error_body(err)
    return body


class CompletionStream:
    """A streamed text completion's SSE bytes, event by event.  ``echo``: the prompt, sent
    first; ``logprobs``: every text chunk carries its legacy logprobs object."""

    def __init__(self, ident: ResponseIdentity, *, logprobs: bool, include_usage: bool,
                 echo: str | None = None) -> None:
        self.ident = ident
        self.logprobs = logprobs
        self.include_usage = include_usage
        self.echo = echo
        self._base = len(echo or "")

    def encode(self, event: TurnEvent) -> list[bytes]:
        """The SSE events for ``event`` (possibly none)."""
        out = self._echo()
        if isinstance(event, Finish):
            return [*out, sse.encode_event(completion_chunk(self.ident, "", finish_reason=event.reason))]
        if isinstance(event, Failed):
            return [*out, sse.encode_event(error_chunk(self.ident, event.error))]
        if isinstance(event, UsageReport):
            if self.include_usage:
                out.append(sse.encode_event({**completion_chunk(self.ident, ""), "choices": [],
                                             "usage": usage_dict(event.usage)}))
            return out
        if isinstance(event, ProfileReport):
            return [*out, sse.encode_event(profile_event(event.key, event.report))]
        piece = _text(event)
        if piece is None or not piece[0]:
            return out
        text, entries = piece
        lp = legacy_logprobs(entries or [], self._base) if self.logprobs else None
        return [*out, sse.encode_event(completion_chunk(self.ident, text, logprobs=lp))]

    def _echo(self) -> list[bytes]:
        if self.echo is None:
            return []
        text, self.echo = self.echo, None
        return [sse.encode_event(completion_chunk(self.ident, text))] if text else []

    def end(self) -> list[bytes]:
        """What closes the stream: ``data: [DONE]``."""
        return [sse.DONE]


class TextCompletion:
    """A non-streamed ``text_completion``, assembled from the run's events; a failure is
    raised (the status is not sent yet)."""

    def __init__(self, ident: ResponseIdentity, *, logprobs: bool, echo: str | None = None) -> None:
        self.ident = ident
        self.logprobs = logprobs
        self.echo = echo or ""
        self._text: list[str] = []
        self._entries: Entries = []
        self._end = RunEnding()

    def add(self, event: TurnEvent) -> None:
        """Take one event (:class:`Failed` raises its error)."""
        if self._end.take(event):
            return
        piece = _text(event)
        if piece is not None:
            self._text.append(piece[0])
            self._entries.extend(piece[1] or ())

    def body(self) -> dict[str, Any]:
        """The ``text_completion`` (after the run's :class:`Finish`)."""
        reason = self._end.finished()
        lp = legacy_logprobs(self._entries, len(self.echo)) if self.logprobs else None
        return self._end.add_profile({
            "id": self.ident.id, "object": OBJECT, "created": self.ident.created, "model": self.ident.model,
            "choices": [{"index": 0, "text": self.echo + "".join(self._text), "logprobs": lp,
                         "finish_reason": reason}],
            "usage": usage_dict(self._end.usage)})
