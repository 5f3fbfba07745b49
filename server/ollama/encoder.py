"""Run events → Ollama's wire: NDJSON lines (:class:`OllamaStream`) or one JSON object
(:class:`OllamaBody`), for ``/api/chat`` (text in ``message.content``) and ``/api/generate``
(text in ``response``).

Pure state machines over :mod:`afm_struct.turn.events`: no I/O, no MLX.  Every line carries
``model`` and ``created_at``; text and thinking pieces stream as they come; a tool call is sent
whole once its arguments are (Ollama's calls carry arguments as an object, never a fragment);
the last line has ``done: true``, ``done_reason`` and the token counts.  A failure after the
headers is one ``{"error": "..."}`` line, which Ollama's clients raise.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Literal

from afm_struct.errors import AfmError, GenerationError
from afm_struct.turn.events import (
    CallArguments,
    CallClosed,
    CallOpened,
    Entries,
    Failed,
    Finish,
    Reasoning,
    ResponseIdentity,
    Text,
    TurnEvent,
    UsageReport,
)
from afm_struct.turn.outputs import FinishReason, Usage

from ..logprob_routing import entry_dict

Kind = Literal["chat", "generate"]
NDJSON = "application/x-ndjson"
# Ollama reports a turn that called tools as "stop".
DONE_REASONS = {FinishReason.TOOL_CALLS: "stop"}


def created_at(created: int) -> str:
    """Ollama's ``created_at``: an RFC 3339 UTC time."""
    return datetime.fromtimestamp(created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def line(payload: dict[str, Any]) -> bytes:
    """One NDJSON line (compact JSON never holds a raw newline)."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def error_line(err: AfmError) -> dict[str, Any]:
    """A failure once the status is sent: Ollama's ``{"error": message}``."""
    return {"error": err.message}


class _Calls:
    """Tool calls being assembled from their fragments, in Ollama's shape once whole."""

    def __init__(self) -> None:
        self._open: dict[int, tuple[str, str, list[str]]] = {}

    def add(self, event: CallOpened | CallArguments) -> None:
        if isinstance(event, CallOpened):
            self._open[event.index] = (event.id, event.name, [event.arguments])
        elif event.index in self._open:
            self._open[event.index][2].append(event.text)

    def close(self, index: int | None = None) -> list[dict[str, Any]]:
        """The whole calls (``index``: that one; None: every one still open)."""
        indexes = sorted(self._open) if index is None else [index]
        return [self._whole(i, *self._open.pop(i)) for i in indexes if i in self._open]

    @staticmethod
    def _whole(index: int, call_id: str, name: str, parts: list[str]) -> dict[str, Any]:
        text = "".join(parts)
        try:
            arguments = json.loads(text) if text.strip() else {}
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            # Ollama's calls hold an object: a cut call has none to give, and is reported.
            raise GenerationError(f"tool call {index} ({name}) ended without whole JSON-object "
                                  "arguments (the token budget, options.num_predict, cut it?)")
        return {"id": call_id, "function": {"index": index, "name": name, "arguments": arguments}}


class _Base:
    def __init__(self, ident: ResponseIdentity, kind: Kind, *, logprobs: bool) -> None:
        self.ident = ident
        self.kind = kind
        self.logprobs = logprobs
        self._calls = _Calls()
        self._reason: FinishReason | None = None
        self._usage = Usage()

    def _head(self) -> dict[str, Any]:
        return {"model": self.ident.model, "created_at": created_at(self.ident.created)}

    def _part(self, *, text: str = "", thinking: str | None = None,
              calls: list[dict[str, Any]] | None = None, entries: Entries | None = None) -> dict[str, Any]:
        out = self._head()
        if self.kind == "chat":
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if thinking:
                message["thinking"] = thinking
            if calls:
                message["tool_calls"] = calls
            out["message"] = message
        else:
            out["response"] = text
            if thinking:
                out["thinking"] = thinking
        if self.logprobs and entries is not None:
            out["logprobs"] = [entry_dict(e) for e in entries]
        out["done"] = False
        return out

    def _final(self, part: dict[str, Any]) -> dict[str, Any]:
        assert self._reason is not None, "the run has not finished"
        usage = self._usage
        return {**part, "done": True, "done_reason": DONE_REASONS.get(self._reason, str(self._reason)),
                "prompt_eval_count": usage.prompt_tokens, "eval_count": usage.completion_tokens}


class OllamaStream(_Base):
    """A streamed answer's NDJSON lines, event by event; the ``done`` line once the usage is
    known (:meth:`end`)."""

    def __init__(self, ident: ResponseIdentity, kind: Kind, *, logprobs: bool) -> None:
        super().__init__(ident, kind, logprobs=logprobs)
        self._failed = False

    def encode(self, event: TurnEvent) -> list[bytes]:
        """The lines for ``event`` (possibly none)."""
        if self._failed:
            return []
        try:
            return self._encode(event)
        except AfmError as err:  # a call that cannot be written: the stream's end
            return self._fail(err)

    def _encode(self, event: TurnEvent) -> list[bytes]:
        if isinstance(event, Text):
            return [line(self._part(text=event.text, entries=event.logprobs or []))] if event.text else []
        if isinstance(event, Reasoning):
            return [line(self._part(thinking=event.text))] if event.text else []
        if isinstance(event, CallOpened | CallArguments):
            self._calls.add(event)
            return []
        if isinstance(event, CallClosed):
            return [line(self._part(calls=self._calls.close(event.index)))]
        if isinstance(event, Failed):
            return self._fail(event.error)
        if isinstance(event, Finish):
            self._reason = event.reason
            calls = self._calls.close()
            return [line(self._part(calls=calls))] if calls else []
        if isinstance(event, UsageReport):
            self._usage = event.usage
        return []  # the profile has no place on Ollama's wire

    def _fail(self, err: AfmError) -> list[bytes]:
        self._failed = True
        return [line(error_line(err))]

    def end(self) -> list[bytes]:
        """The ``done`` line (nothing after a failure: its error line ended the stream)."""
        if self._failed or self._reason is None:
            return []
        return [line(self._final(self._part()))]


class OllamaBody(_Base):
    """A non-streamed answer: one object, ``done: true``; a failure is raised (the status is
    not sent yet)."""

    def __init__(self, ident: ResponseIdentity, kind: Kind, *, logprobs: bool) -> None:
        super().__init__(ident, kind, logprobs=logprobs)
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._done_calls: list[dict[str, Any]] = []
        self._entries: Entries = []

    def add(self, event: TurnEvent) -> None:
        """Take one event (:class:`Failed` raises its error)."""
        if isinstance(event, Failed):
            raise event.error
        if isinstance(event, Text):
            self._text.append(event.text)
            self._entries.extend(event.logprobs or ())
        elif isinstance(event, Reasoning):
            self._thinking.append(event.text)
        elif isinstance(event, CallOpened | CallArguments):
            self._calls.add(event)
        elif isinstance(event, CallClosed):
            self._done_calls += self._calls.close(event.index)
        elif isinstance(event, Finish):
            self._reason = event.reason
            self._done_calls += self._calls.close()
        elif isinstance(event, UsageReport):
            self._usage = event.usage

    def body(self) -> dict[str, Any]:
        """The whole answer."""
        return self._final(self._part(text="".join(self._text), thinking="".join(self._thinking) or None,
                                      calls=self._done_calls or None,
                                      entries=self._entries if self.logprobs else None))
