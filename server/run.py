"""An admitted generation, as typed events: what every protocol's response is written from.

:class:`Run` yields the answer events that ride the scheduler's text deltas (the request's
:class:`~afm_struct.turn.turn.Turn` made them on the scheduler thread; logprob entries ride
the events that show their tokens; best-effort JSON is held back and sanitized at the end),
then the end events (:class:`Finish` or :class:`Failed`, usage, the
profile).  :func:`sse_body` writes a run through a protocol's stream encoder, :func:`collect`
through its body encoder: the encoders are pure, the I/O is here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from afm_struct.decoding.scheduler import Handle
from afm_struct.errors import AfmError, GenerationError, internal_error
from afm_struct.library.confidence import field_confidence
from afm_struct.serving.partials import PartialValues
from afm_struct.serving.token_details import TokenDetails
from afm_struct.turn.events import (
    AnswerEvent,
    CallArguments,
    CallOpened,
    EndEvent,
    EnforcementReport,
    Entries,
    Failed,
    Finish,
    ProfileReport,
    Text,
    TokenFieldsReport,
    TurnEvent,
    UsageReport,
)
from afm_struct.turn.outputs import Finished, FinishReason, TextDelta, Timings, Usage

from .cancel import Inflight
from .extensions import format_enforcement
from .logprob_routing import LogprobRouting, within
from .profile import PROFILE_EXTENDED, ProfileSampler, build_extended, build_profile, read_energy_uj
from .state import ServerState

if TYPE_CHECKING:
    from .prepared import Prepared


class Run:
    """An admitted generation: its answer events, then its end events; closes idempotently."""

    def __init__(self, state: ServerState, prepared: Prepared, entry: Inflight, handle: Handle) -> None:
        self.state = state
        self.prepared = prepared
        self.entry = entry
        self.handle = handle
        self._outcome: tuple[FinishReason, Finished, AfmError | None] | None = None
        self._energy0 = read_energy_uj()
        self._sampler: ProfileSampler | None = None
        self._details: TokenDetails | None = None  # token details asked for: set by answer()
        if prepared.plan.delivery.profile == PROFILE_EXTENDED:
            self._sampler = ProfileSampler(prepared.counter, state.settings.profile_interval_s).start()

    @property
    def request_id(self) -> str:
        """The correlation ID (``X-Request-ID``)."""
        return self.prepared.plan.request_id

    @property
    def outcome(self) -> tuple[FinishReason, Finished, AfmError | None] | None:
        """How the run ended (finish reason, the generator's end, the error), None until then:
        read by the metrics and the request log (server/observe.py)."""
        return self._outcome

    def close(self) -> None:
        """Stop generation if still running (client gone) and release the request ID."""
        if not self.handle.finished.is_set():
            self.handle.cancel()
        self.state.registry.complete(self.entry)
        if self._sampler is not None:
            self._sampler.stop()

    async def events(self) -> AsyncIterator[TurnEvent]:
        """Every event: :meth:`answer`, then :meth:`ending`."""
        async for event in self.answer():
            yield event
        for end in self.ending():
            yield end

    async def answer(self) -> AsyncIterator[AnswerEvent]:
        """The answer's events in order, each with the logprob entries it carries when asked
        for; afterwards the outcome is known (:meth:`ending`)."""
        prepared = self.prepared
        structured = prepared.structured
        # The request's turn: the scheduler thread feeds it the text it emits and its events
        # ride the deltas; read here once the generator is done with it (its finish reason).
        turn = prepared.generation.turn
        deferred: list[str] = []
        deferred_entries: Entries = []
        delivery = prepared.plan.delivery
        routing = LogprobRouting() if prepared.plan.logprobs is not None or delivery.token_details else None
        partials = PartialValues(json_content=structured.json_output) if delivery.include_partial else None
        details = self._details = (TokenDetails(json_content=structured.json_output)
                                   if delivery.token_details else None)

        def route(text: str, events: list[AnswerEvent], entries: Entries | None) -> list[AnswerEvent]:
            slots = routing.assign(text, events, entries) if routing is not None else [None] * len(events)
            out: list[AnswerEvent] = []
            for event, slot in zip(events, slots, strict=True):
                if isinstance(event, Text) and structured.defer:
                    # best-effort JSON: held back for sanitizing at the end
                    deferred.append(event.text)
                    deferred_entries.extend(slot or ())
                    continue
                if isinstance(event, Text | CallOpened | CallArguments):
                    event.logprobs = slot
                if partials is not None:
                    partials.attach(event)
                if details is not None:
                    details.attach(event)
                out.append(event)
            return out

        async for event in self.handle.events():
            if isinstance(event, TextDelta):
                for item in route(event.text, event.events or [], event.logprobs):
                    yield item
                continue
            assert isinstance(event, Finished)
            for item in route("", event.events or [], None):
                yield item
            cancelled = self.state.registry.complete(self.entry)
            if event.reason == FinishReason.ERROR:
                err = event.error or GenerationError("generation failed")
                self._outcome = (FinishReason.ERROR, event, err)
                break
            if deferred:
                raw = "".join(deferred)
                text = structured.sanitize(raw)
                if text:
                    whole = Text(text, within(deferred_entries, raw, text) if routing else None)
                    if partials is not None:
                        partials.attach(whole)
                    if details is not None:
                        details.attach(whole)
                    yield whole
            reason = (FinishReason.CANCELLED if cancelled
                      else turn.finish_reason(event.reason, whole=event.whole))
            self._outcome = (reason, event, None)
        if self._outcome is None:  # defensive: the event stream ended without a Finished
            self.fail(GenerationError("the server is shutting down"))

    def fail(self, err: AfmError) -> None:
        """End the run with ``err``, a failure outside the generator (usage: the prompt)."""
        usage = Usage(prompt_tokens=len(self.prepared.generation.prompt_ids))
        self._outcome = (FinishReason.ERROR, Finished(FinishReason.ERROR, usage, Timings(), ""), err)

    def ending(self) -> Iterator[EndEvent]:
        """How the run ended (after :meth:`answer`): :class:`Finish` or :class:`Failed`, the
        usage, and the token fields, the enforcement report and the profile when asked for."""
        assert self._outcome is not None, "ending() before the answer ended"
        reason, finished, err = self._outcome
        yield Failed(err) if err is not None else Finish(reason, stop=finished.stop)
        yield UsageReport(finished.usage)
        if self._details is not None:
            yield TokenFieldsReport(self._details.fields(), self._confidence(self._details))
        if self.prepared.plan.delivery.enforcement:
            yield EnforcementReport(format_enforcement(self.prepared.structured))
        report = self.profile(finished)
        key = self.prepared.plan.delivery.profile
        if report is not None and key is not None:
            yield ProfileReport(key, report)

    def _confidence(self, details: TokenDetails) -> dict[str, dict[str, Any]]:
        """``extract()``'s per-field confidence of a JSON content answer ({} otherwise)."""
        entries = details.content_entries
        if not details.json_content or not entries:
            return {}
        text = "".join(details.content_text)
        found = field_confidence(text, entries, base=entries[0].offset)
        return {path: {"mean_logprob": round(c.mean_logprob, 6), "min_logprob": round(c.min_logprob, 6),
                       "probability": round(c.probability, 6), "tokens": c.tokens}
                for path, c in found.items()}

    def profile(self, finished: Finished) -> dict[str, Any] | None:
        """The profile payload for this run, if one was asked for."""
        key = self.prepared.plan.delivery.profile
        if key is None:
            return None
        samples = self._sampler.stop() if self._sampler is not None else []
        wall = time.perf_counter() - self.prepared.started
        summary = build_profile(self.state.loaded, finished, request_id=self.request_id,
                                wall_s=wall, blas=self.state.blas,
                                energy_uj=(self._energy0, read_energy_uj()))
        if key == PROFILE_EXTENDED:
            return build_extended(summary, samples, self.state.settings.profile_interval_s)
        return summary


class StreamEncoder(Protocol):
    """A protocol's streamed response: its SSE events for each run event, then its close."""

    def encode(self, event: TurnEvent) -> list[bytes]:
        """The SSE bytes for ``event`` (possibly none)."""

    def end(self) -> list[bytes]:
        """What closes the stream (chat: ``data: [DONE]``)."""


class BodyEncoder(Protocol):
    """A protocol's whole response body, assembled from the run's events."""

    def add(self, event: TurnEvent) -> None:
        """Take one event (a failure raises: the status is not sent yet)."""

    def body(self) -> dict[str, Any]:
        """The response body."""


# Most bytes one write of a stream holds (frames that were ready together).
COALESCE_BYTES = 64 * 1024


async def sse_body(run: Run, encoder: StreamEncoder) -> AsyncIterator[bytes]:
    """The SSE byte stream of ``run``: a failure once the status is sent (a server bug while
    streaming) is reported in-band, as the run's end.

    The frames of events that are ready together go out as one write: the bytes on the wire
    are the same, but each write costs the event loop its way through the ASGI middlewares,
    h11 and a socket send (~60 % of the loop's time per token at 32 streams, issue 40).  A
    frame is never held back waiting for an event: it goes out as soon as no further event is
    ready, so a stream that keeps up writes once per event, as before, and one whose loop fell
    behind catches up in fewer writes."""
    pending: list[bytes] = []
    size = 0
    try:
        async for event in run.answer():
            for frame in encoder.encode(event):
                pending.append(frame)
                size += len(frame)
            if pending and (size >= COALESCE_BYTES or not run.handle.ready()):
                yield b"".join(pending)
                pending.clear()
                size = 0
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a server bug mid-stream: the status is sent, so report in-band
        run.fail(internal_error(exc, [run.request_id], what="streaming failed"))
    # The end events and the stream's close are ready at once: one write with what is pending.
    for end in run.ending():
        pending.extend(encoder.encode(end))
    pending.extend(encoder.end())
    if pending:
        yield b"".join(pending)


async def collect(run: Run, encoder: BodyEncoder) -> dict[str, Any]:
    """The whole body of ``run``; a generation error is raised (headers not sent yet)."""
    async for event in run.events():
        encoder.add(event)
    return encoder.body()
