"""Faults injected into one row of a running generator (tests of failure isolation).

A fault wraps one part a row owns (its matcher, sampler, budget closer or event sink) and fails
at the ``after``-th call of one of its methods from now, as the real parts fail: an exception,
a grammar engine that rejects a token it allowed, or one that stops while computing a mask and
says so only through ``error()`` (llguidance's silent stop).  Its message carries :data:`MARK`,
which stands for the engine's internals and must never reach the client.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from afm_struct.turn.outputs import Finished

MARK = "ENGINE-INTERNALS <state>Parser: {rows: 1}</state>"

# fault -> the method of the wrapped part that fails
MATCHER_FAULTS = {
    "mask_raise": "fill_mask",      # the engine raises while computing a mask
    "mask_silent": "fill_mask",     # the engine stops while computing a mask (error() says so)
    "advance_false": "advance",     # the engine rejects a token it allowed
    "advance_raise": "advance",
    "over_limits": "advance",       # the engine stops on its lexer / parser budgets
    "forced_raise": "forced_tokens",
    "finished_raise": "is_finished",
}
OTHER_FAULTS = ("sample", "emit", "closer")
FAULTS = (*MATCHER_FAULTS, *OTHER_FAULTS)


class Trigger:
    """Counts calls of one method; fires once, at the ``after``-th."""

    def __init__(self, method: str, after: int) -> None:
        self.method = method
        self.after = after
        self.calls = 0
        self.fired = False

    def hit(self, method: str) -> bool:
        if method != self.method or self.fired:
            return False
        self.calls += 1
        self.fired = self.calls >= self.after
        return self.fired


class FaultyMatcher:
    """A matcher that behaves as ``inner`` until its fault fires; forks are healthy copies."""

    def __init__(self, inner: Any, fault: str, after: int) -> None:
        self.inner = inner
        self.fault = fault
        self.trigger = Trigger(MATCHER_FAULTS[fault], after)
        self.broken = False

    def fill_mask(self, row: Any) -> None:
        if self.trigger.hit("fill_mask"):
            if self.fault == "mask_raise":
                raise RuntimeError(MARK)
            self.broken = True
        if self.broken:
            row[:] = 0
            return
        self.inner.fill_mask(row)

    def batch_fill(self) -> Any:
        """The inner matcher's batch fill while healthy, so a faulty row rides the decode
        step's one engine call with the others.  A ``mask_silent`` fault firing here stops the
        engine itself, as llguidance stops (a real error state: it consumes a token its mask
        bans), and the batch call then runs over the stopped engine; ``mask_raise`` (a Python
        exception, which the engine's batch call cannot raise for one row) fills alone."""
        offer = getattr(self.inner, "batch_fill", None)
        fill = offer() if offer is not None else None
        if fill is None or self.broken or self.fault == "mask_raise":
            return None
        if self.fault == "mask_silent" and self.trigger.hit("fill_mask"):
            self.broken = True
            row = np.zeros(fill.words, dtype=np.int32)
            self.inner.fill_mask(row)
            bits = np.unpackbits(row.view(np.uint8), bitorder="little")
            banned = int(np.flatnonzero(bits == 0)[0])
            assert not fill.handle.consume_token(banned) and fill.handle.is_error()
        return fill

    def advance(self, token: int) -> bool:
        if self.trigger.hit("advance"):
            if self.fault == "advance_raise":
                raise RuntimeError(MARK)
            self.broken = True
        return False if self.broken else self.inner.advance(token)

    def forced_tokens(self) -> list[int]:
        if self.trigger.hit("forced_tokens"):
            raise RuntimeError(MARK)
        return [] if self.broken else self.inner.forced_tokens()

    def is_accepting(self) -> bool:
        return False if self.broken else self.inner.is_accepting()

    def is_finished(self) -> bool:
        if self.trigger.hit("is_finished"):
            raise RuntimeError(MARK)
        return True if self.broken else self.inner.is_finished()  # llguidance: stopped on error

    def error(self) -> str | None:
        return MARK if self.broken else self.inner.error()

    def over_limits(self) -> bool:
        return self.broken and self.fault == "over_limits"

    def fork(self) -> Any:
        return None if self.broken else self.inner.fork()


class FaultySampler:
    """A row sampler that raises at its ``after``-th draw."""

    def __init__(self, inner: Any, after: int) -> None:
        self.inner = inner
        self.trigger = Trigger("draw", after)

    def distribution(self, logits: Any) -> Any:
        return self.inner.distribution(logits)

    def draw(self, processed: Any) -> Any:
        if self.trigger.hit("draw"):
            raise RuntimeError(MARK)
        return self.inner.draw(processed)

    def __call__(self, logits: Any) -> Any:
        if self.trigger.hit("draw"):
            raise RuntimeError(MARK)
        return self.inner(logits)


class FaultyCloser:
    """A budget closer that raises at its ``after``-th look at the budget."""

    def __init__(self, inner: Any, after: int) -> None:
        self.inner = inner
        self.trigger = Trigger("look", after)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def before_sample(self, *args: Any) -> Any:
        if self.trigger.hit("look"):
            raise RuntimeError(MARK)
        return self.inner.before_sample(*args)

    def review(self, *args: Any) -> Any:
        if self.trigger.hit("look"):
            raise RuntimeError(MARK)
        return self.inner.review(*args)


class FaultySink:
    """An event sink that cannot take its ``after``-th text delta (it still takes the end)."""

    def __init__(self, inner: Any, after: int) -> None:
        self.inner = inner
        self.trigger = Trigger("delta", after)

    def __call__(self, event: Any) -> None:
        if not isinstance(event, Finished) and self.trigger.hit("delta"):
            raise RuntimeError(MARK)
        self.inner(event)


def applicable(seq: Any) -> list[str]:
    """The faults ``seq`` has the parts for (an unconstrained row has no matcher, a row
    without budget closing no closer)."""
    return [f for f in FAULTS if (f not in MATCHER_FAULTS or seq.matcher is not None)
            and (f != "closer" or seq.closer is not None)]


def arm(seq: Any, fault: str, after: int) -> Trigger:
    """Wrap the part of ``seq`` that ``fault`` (one of :func:`applicable`) concerns."""
    if fault in MATCHER_FAULTS:
        seq.matcher = FaultyMatcher(seq.matcher, fault, after)
        return seq.matcher.trigger
    if fault == "closer":
        seq.closer = FaultyCloser(seq.closer, after)
        return seq.closer.trigger
    if fault == "emit":
        seq.sink = FaultySink(seq.sink, after)
        return seq.sink.trigger
    seq.sampler = FaultySampler(seq.sampler, after)
    return seq.sampler.trigger
