"""What a run yields, in order: the answer's parts, then how it ended.

The answer events come from the request's turn (:class:`~afm_struct.turn.turn.Turn`, an
:class:`AnswerRouter`; with tools, with the call layer of :mod:`afm_struct.tools.call_stream`), fed
by the generator; they ride its text deltas.  One event per channel piece a generation step
produced: consecutive text of one channel in a step is one
event.  Logprob entries ride the event whose text they show (``None`` when the request did not
ask for them; a list, possibly empty, when it did).  Then the end: :class:`Finish` or
:class:`Failed`, a :class:`UsageReport` and, when asked for, a :class:`ProfileReport`.

A protocol encoder maps these to its wire (chat: one chunk per answer event; the Responses
API: output items and their deltas), with the :class:`ResponseIdentity` the core made.
Standard library and the engine's output values only: no MLX (the wire modules import this
without loading the engine).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import AfmError
from .outputs import FinishReason, TokenLogprob, Usage

Entries = list[TokenLogprob]
# The enforcement report's key in a body or stream event (an AFM extension).
ENFORCEMENT_KEY = "afm_enforcement"
# Token details (an AFM extension, afm_struct/serving/token_details.py): the per-token records
# on an answer event's choice, and the per-field sums at the end.
TOKEN_DETAILS_KEY = "afm_token_details"
TOKEN_FIELDS_KEY = "afm_token_fields"
CONFIDENCE_KEY = "afm_field_confidence"
Details = list[dict[str, Any]]


@dataclass(frozen=True)
class ResponseIdentity:
    """What every part of one response repeats: its id, creation time and model name (made by
    the core once the request is admissible)."""

    id: str
    created: int
    model: str


@dataclass(frozen=True)
class Partial:
    """The value parsed so far of a growing JSON text (a content answer or a call's
    arguments): any JSON value, ``None`` being JSON null.  Rides an answer event when the
    request asked for partial values (``stream_options.include_partial``)."""

    value: Any


@dataclass
class Text:
    """Answer text (chat's ``content``); ``partial``: the whole answer's value so far, when
    asked for and some prefix of it parses."""

    text: str
    logprobs: Entries | None = None
    partial: Partial | None = None
    details: Details | None = None  # token details, when asked for


@dataclass
class Reasoning:
    """Text of a thinking block (never carries logprobs: reasoning tokens are not reported)."""

    text: str


@dataclass
class CallOpened:
    """A tool call begins: its index (order of calls), id and whole name.  ``arguments`` is the
    first fragment of its arguments when the same step generated it (else empty); the logprobs
    are those of the call's markup and that fragment."""

    index: int
    id: str
    name: str
    arguments: str = ""
    logprobs: Entries | None = None
    partial: Partial | None = None
    details: Details | None = None  # token details, when asked for


@dataclass
class CallArguments:
    """More of call ``index``'s arguments (JSON text, as generated); ``partial``: the
    arguments' value so far, as for :class:`Text`."""

    index: int
    text: str
    logprobs: Entries | None = None
    partial: Partial | None = None
    details: Details | None = None  # token details, when asked for


@dataclass
class CallClosed:
    """Call ``index`` is whole: its arguments are complete (``cut``: completed by the parser,
    the call was cut short: a Responses API item is ``incomplete``)."""

    index: int
    cut: bool = False


AnswerEvent = Text | Reasoning | CallOpened | CallArguments | CallClosed


@dataclass
class Finish:
    """The answer ended normally: ``reason`` as the wire reports it (stop, length, tool_calls,
    cancelled).  ``stop``: the stop sequence that ended it, if one did."""

    reason: FinishReason
    stop: str | None = None


@dataclass
class Failed:
    """Generation failed after admission (the status may be sent): the error to report."""

    error: AfmError


@dataclass
class UsageReport:
    """Token counts of the run (after :class:`Finish` or :class:`Failed`)."""

    usage: Usage


@dataclass
class ProfileReport:
    """The profile asked for (``X-AFM-Profile``): its key (``afm_profile`` /
    ``afm_profile_extended``) and payload.  Last, when asked for."""

    key: str
    report: dict[str, Any]


@dataclass
class EnforcementReport:
    """The enforcement report asked for (``X-AFM-Enforcement``): what of the output format's
    schema the grammar enforced (``afm_struct/grammar/enforcement.py``), None for a request
    without one.  After the usage, before the profile."""

    report: dict[str, Any] | None


@dataclass
class TokenFieldsReport:
    """The per-field sums of the token details asked for (tokens, forced, logprob, pressure
    by JSON path) and the per-field confidence of a JSON answer (``extract()``'s: the mean and
    minimum logprob of each leaf value's tokens).  After the usage, before the enforcement
    report."""

    fields: dict[str, dict[str, Any]]
    confidence: dict[str, dict[str, Any]] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        """``{afm_token_fields: …, afm_field_confidence: …}``: the stream event, the body keys."""
        return {TOKEN_FIELDS_KEY: self.fields, CONFIDENCE_KEY: self.confidence}


EndEvent = Finish | Failed | UsageReport | TokenFieldsReport | EnforcementReport | ProfileReport
TurnEvent = AnswerEvent | EndEvent


@dataclass
class RunEnding:
    """How a run ended, gathered from its end events by an encoder that answers whole (not
    streamed): the finish reason, the usage and the profile; a :class:`Failed` is raised."""

    reason: FinishReason | None = None
    usage: Usage = field(default_factory=Usage)
    profile: ProfileReport | None = None
    enforcement: EnforcementReport | None = None
    token_fields: TokenFieldsReport | None = None

    def take(self, event: TurnEvent) -> bool:
        """Record ``event`` if it is an end event (True); False for an answer event.
        :class:`Failed` raises its error (the status is not sent yet)."""
        if isinstance(event, Failed):
            raise event.error
        if isinstance(event, Finish):
            self.reason = event.reason
        elif isinstance(event, UsageReport):
            self.usage = event.usage
        elif isinstance(event, ProfileReport):
            self.profile = event
        elif isinstance(event, EnforcementReport):
            self.enforcement = event
        elif isinstance(event, TokenFieldsReport):
            self.token_fields = event
        else:
            return False
        return True

    def finished(self) -> FinishReason:
        """The finish reason (after the run's :class:`Finish`)."""
        assert self.reason is not None, "the run has not finished"
        return self.reason

    def add_profile(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` with the AFM reports asked for: the enforcement report
        (``afm_enforcement``) and the profile under its key."""
        if self.enforcement is not None:
            body[ENFORCEMENT_KEY] = self.enforcement.report
        if self.token_fields is not None:
            body.update(self.token_fields.body())
        if self.profile is not None:
            body[self.profile.key] = self.profile.report
        return body


class AnswerRouter(Protocol):
    """Generated text → answer events (a pure state machine, one per generation)."""

    def feed(self, text: str) -> list[AnswerEvent]:
        """The events ``text`` makes available (possibly none while a tag is ambiguous)."""

    def finish(self) -> list[AnswerEvent]:
        """Events held back until the end of generation."""

    def finish_reason(self, reason: FinishReason, *, whole: bool = False) -> FinishReason:
        """The wire finish reason for the generator's ``reason`` (e.g. ``tool_calls``);
        ``whole``: a ``length`` end left the model's text whole (``Finished.whole``)."""


def add_text(out: list[AnswerEvent], kind: type[Text] | type[Reasoning], text: str) -> None:
    """Append ``text`` to ``out``: onto its last event when that is the same channel (one event
    per channel piece of a step)."""
    if not text:
        return
    last = out[-1] if out else None
    if type(last) is kind:
        last.text += text  # type: ignore[union-attr]
    else:
        out.append(kind(text))
