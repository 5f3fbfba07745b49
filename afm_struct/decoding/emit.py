"""How a sequence's decided tokens become its events: text deltas, then exactly one Finished.

Plain functions over a :class:`~afm_struct.decoding.sequence.SequenceState`: the decode step
emits each sampled run (:func:`emit_run`), and every phase that ends a sequence (a finished row,
a cancel, a prefill error, a grammar already complete after its prompt) goes through
:func:`finish`, which flushes held text and sends the one :class:`Finished`; a failure that
ends one sequence goes through :func:`fail`.  Neither raises: a request always gets its end.
"""

from __future__ import annotations

import logging
import time

from ..errors import AfmError
from .failures import request_error
from .outputs import Finished, FinishReason, TextDelta
from .sequence import SequenceState

log = logging.getLogger("afm_struct")


def emit_run(seq: SequenceState, run: list[int]) -> None:
    """Emit the text of a sampled token and its forced run; finish the row if it ended."""
    # Without stops_cut_grammar, stop sequences end free text only: the first constrained
    # token (sampled under a mask that is not free text, or forced, or closing) begins a
    # tool call, and from there nothing is cut (inside a JSON string the mask is free
    # again, so the state is kept rather than judged per token).
    exempt = not seq.request.stops_cut_grammar and seq.matcher is not None
    for i, t in enumerate(run):
        text = seq.detok.add(t)
        if seq.track is not None:
            seq.track.text(text)
        if exempt and (i > 0 or not seq.mask_free):
            seq.stops_off = True
        if seq.stops_off:
            held = seq.stops.flush()
            if seq.stops.stopped:  # a stop the held free text still held (overlapping stops)
                emit_text(seq, held)
                finish(seq, FinishReason.STOP)
                return
            emit_text(seq, held + text)  # held text first, in order
            continue
        emit_text(seq, seq.stops.feed(text))
        if seq.stops.stopped:
            finish(seq, FinishReason.STOP)
            return
    if seq.closer is not None and seq.closer.closed:
        # Closed early by the budget: still a cut.  An empty completion (nothing fed) means the
        # model's text was already whole and the token it chose began an item that could not
        # fit (a next tool call): ``whole`` lets the tool router end the turn with tool_calls.
        finish(seq, FinishReason.LENGTH, whole=not run and _accepting(seq))
    elif seq.eos:
        finish(seq, FinishReason.STOP, grammar_complete=True)
    elif seq.matcher is not None and seq.matcher.is_finished():
        finish(seq, FinishReason.STOP, grammar_complete=True)
    elif seq.turn is not None and seq.turn.is_finished():  # the text ended the turn (<|call|>)
        finish(seq, FinishReason.STOP)
    elif len(seq.tokens) >= seq.max_tokens:
        finish(seq, FinishReason.LENGTH, whole=_accepting(seq))


def _accepting(seq: SequenceState) -> bool:
    return seq.matcher is not None and seq.matcher.is_accepting()


def emit_text(seq: SequenceState, text: str, *, last: bool = False) -> None:
    """Send ``text`` (if any) as a delta, with the logprob entries it shows when asked."""
    if not text:
        return
    if seq.track is None:
        seq.sink(TextDelta(text))
    else:
        # The tokens whose text this shows (all the rest, once a stop string cut the text).
        final = last or seq.stops.stopped
        seq.sink(TextDelta(text, seq.track.emitted(len(text), final=final)))
    seq.text.append(text)  # what the consumer took: Finished.text is exactly its deltas


def finish(seq: SequenceState, reason: FinishReason, *, error: AfmError | None = None,
           grammar_complete: bool | None = None, whole: bool = False) -> None:
    """End ``seq`` with its one :class:`Finished` (a second call does nothing).  Never raises:
    a failure while flushing the held text turns the end into an error."""
    if seq.done:
        return
    seq.done = True
    try:
        # An end other than an error flushes the held text (a partial stop-string match, a
        # split character): it is output the client should see.
        flushes = reason in (FinishReason.STOP, FinishReason.LENGTH, FinishReason.CANCELLED)
        if flushes and not seq.stops.stopped:
            tail = seq.detok.flush()
            if seq.track is not None:
                seq.track.tail(tail)
            emit_text(seq, seq.stops.feed(tail))
            if not seq.stops.stopped:
                emit_text(seq, seq.stops.flush(), last=True)
        if seq.matcher is not None and grammar_complete is None and reason != FinishReason.ERROR:
            grammar_complete = seq.matcher.is_accepting()
    except Exception as exc:
        reason, error = FinishReason.ERROR, error or request_error(exc, [seq.request.request_id])
    if reason == FinishReason.ERROR:
        grammar_complete = False if seq.matcher is not None else None
    if seq.decode_start:
        seq.timings.decode_s = time.perf_counter() - seq.decode_start
    seq.logits = None
    seq.cache = None
    try:
        seq.sink(Finished(reason=reason, usage=seq.usage, timings=seq.timings, text="".join(seq.text),
                          error=error, grammar_complete=grammar_complete,
                          whole=whole and reason != FinishReason.ERROR))
    except Exception:  # the consumer cannot take its end: nothing else to tell it
        log.exception("could not deliver the end of request %s", seq.request.request_id or "-")


def fail(seq: SequenceState, exc: BaseException) -> None:
    """End ``seq`` alone with the error ``exc`` means for it (see :mod:`.failures`)."""
    finish(seq, FinishReason.ERROR, error=request_error(exc, [seq.request.request_id]))
