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
from typing import Any

from ..errors import AfmError
from ..turn.outputs import Finished, FinishReason, TextDelta
from ..turn.reasoning import THINK
from .failures import request_error
from .sequence import SequenceState

log = logging.getLogger("afm_struct")


def read_token(seq: SequenceState, token: int, *, forced: bool) -> None:
    """Read one decided token's text, right after its matcher took it: the detokenizer, the
    stop strings, then the request's turn, whose events wait in ``seq.outbox`` with the text
    for :func:`emit_run`.  ``forced``: not the sampled token (a forced or closing run).

    A token read while the turn is thinking, or that leaves it thinking, counts as a
    reasoning token: from the token that completes the open tag (its earlier tokens were read
    before the turn knew it was a tag) through the one that completes the close tag.  The
    turn's phase, not a re-tokenized text."""
    if seq.stops.stopped:
        return  # the text after a stop string is never read
    turn = seq.turn
    thinking = turn is not None and turn.phase == THINK
    _read(seq, token, forced=forced)
    if thinking or (turn is not None and turn.phase == THINK):
        seq.usage.reasoning_tokens += 1


def _read(seq: SequenceState, token: int, *, forced: bool) -> None:
    if token in seq.request.hidden_token_ids and seq.turn is not None:
        # No text is shown for it, but the turn still reads an end of turn there (<|return|>).
        seq.turn.unseen(seq.detok.hidden_text(token))
    text = seq.detok.add(token)
    if seq.track is not None:
        seq.track.text(text)
    # Without stops_cut_grammar, stop sequences end free text only: the first constrained
    # token (sampled under a mask that is not free text, or forced, or closing) begins a
    # tool call, and from there nothing is cut (inside a JSON string the mask is free
    # again, so the state is kept rather than judged per token).
    if not seq.request.stops_cut_grammar and seq.matcher is not None and (forced or not seq.mask_free):
        seq.stops_off = True
    if seq.stops_off:
        held = seq.stops.flush()
        # A stop the held free text still held (overlapping stops) ends it; else held text
        # goes first, in order.
        _out(seq, held if seq.stops.stopped else held + text)
        return
    _out(seq, seq.stops.feed(text))


def _out(seq: SequenceState, text: str, *, last: bool = False) -> None:
    """``text`` read: through the turn, onto the outbox; a stop string ends the turn."""
    turn = seq.turn
    events = None
    if turn is not None:
        events = turn.feed(text) if text else []
        if seq.stops.stopped:
            turn.stop()
        else:
            turn.hold(seq.stops.held)
    if text:
        seq.outbox.append((text, events, last or seq.stops.stopped))


def send_outbox(seq: SequenceState) -> None:
    """Send the text read so far, in order, as deltas with their events."""
    box, seq.outbox = seq.outbox, []
    for text, events, last in box:
        emit_text(seq, text, events=events, last=last)


def emit_runs(runs: list[tuple[SequenceState, list[int]]]) -> None:
    """Emit each row's run (:func:`emit_run`); a row whose emission fails ends alone.  Text goes
    out before the next forward pass, not after it: a client sees each token one forward pass
    (a whole batch step) sooner, and a row a stop string ends leaves the batch before that pass."""
    for seq, run in runs:
        try:
            emit_run(seq, run)
        except Exception as exc:
            fail(seq, exc)


def emit_run(seq: SequenceState, run: list[int]) -> None:
    """Emit the text read for a sampled token and its forced run; finish the row if it ended."""
    send_outbox(seq)
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
    elif seq.watcher is not None and seq.watcher.is_finished():  # the text ended the turn (<|call|>)
        finish(seq, FinishReason.STOP)
    elif seq.turn is not None and seq.turn.calls_exhausted and (seq.matcher is None or _accepting(seq)):
        # Every call allowed (max_tool_calls) is made; a grammar first writes its call's markup.
        finish(seq, FinishReason.STOP)
    elif len(seq.tokens) >= seq.max_tokens:
        finish(seq, FinishReason.LENGTH, whole=_accepting(seq))


def _accepting(seq: SequenceState) -> bool:
    return seq.matcher is not None and seq.matcher.is_accepting()


def emit_text(seq: SequenceState, text: str, *, events: list[Any] | None = None,
              last: bool = False) -> None:
    """Send ``text`` (if any) as a delta, with the logprob entries it shows when asked and the
    turn's events for it.  ``last``: the last text (a stop string cut it, or the end)."""
    if not text:
        return
    if seq.track is None:
        seq.sink(TextDelta(text, events=events))
    else:
        # The tokens whose text this shows (all the rest, once a stop string cut the text).
        seq.sink(TextDelta(text, seq.track.emitted(len(text), final=last), events))
    seq.text.append(text)  # what the consumer took: Finished.text is exactly its deltas


def finish(seq: SequenceState, reason: FinishReason, *, error: AfmError | None = None,
           grammar_complete: bool | None = None, whole: bool = False) -> None:
    """End ``seq`` with its one :class:`Finished` (a second call does nothing).  Never raises:
    a failure while flushing the held text turns the end into an error."""
    if seq.done:
        return
    seq.done = True
    events: list[Any] | None = None  # what the turn held until the end
    try:
        # An end other than an error flushes the held text (a partial stop-string match, a
        # split character): it is output the client should see.
        flushes = reason in (FinishReason.STOP, FinishReason.LENGTH, FinishReason.CANCELLED)
        if flushes:
            send_outbox(seq)
        if flushes and not seq.stops.stopped:
            tail = seq.detok.flush()
            if seq.track is not None:
                seq.track.tail(tail)
            _out(seq, seq.stops.feed(tail))
            if not seq.stops.stopped:
                _out(seq, seq.stops.flush(), last=True)
            send_outbox(seq)
        if seq.turn is not None:  # an error's too: what the turn held went out before it
            events = seq.turn.finish()
        if seq.matcher is not None and grammar_complete is None and reason != FinishReason.ERROR:
            grammar_complete = seq.matcher.is_accepting()
    except Exception as exc:
        reason, error = FinishReason.ERROR, error or request_error(exc, [seq.request.request_id])
    if reason == FinishReason.ERROR:
        grammar_complete = False if seq.matcher is not None else None
    if seq.decode_start:
        seq.timings.decode_s = time.perf_counter() - seq.decode_start
    seq.logits = seq.logits_row = None
    seq.cache = None
    try:
        seq.sink(Finished(reason=reason, usage=seq.usage, timings=seq.timings, text="".join(seq.text),
                          error=error, grammar_complete=grammar_complete,
                          whole=whole and reason != FinishReason.ERROR, events=events,
                          stop=seq.stops.matched if reason == FinishReason.STOP else None))
    except Exception:  # the consumer cannot take its end: nothing else to tell it
        log.exception("could not deliver the end of request %s", seq.request.request_id or "-")


def fail(seq: SequenceState, exc: BaseException) -> None:
    """End ``seq`` alone with the error ``exc`` means for it (see :mod:`.failures`)."""
    finish(seq, FinishReason.ERROR, error=request_error(exc, [seq.request.request_id]))
