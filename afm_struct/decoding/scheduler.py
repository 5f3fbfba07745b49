"""One thread owns the model and steps every admitted sequence; callers talk to it by queues.

``Scheduler.submit`` is safe from any thread (the HTTP event loop included): it admits the
request into a bounded queue or raises :class:`OverloadedError` at once, before any response
starts.  Events come back on the returned :class:`Handle`, as a blocking iterator or, when a
loop is given, through an ``asyncio.Queue`` fed with ``call_soon_threadsafe``.

The thread drives the generator's phases (:mod:`.generator`) one iteration at a time: admit
arrivals, join short prompt tails, sample and emit; when rows just left the shared batch group,
admit again (holding briefly for replacements, :mod:`.join_wait`) and join tails again, so the
replacements ride the forward pass launched next; then launch that pass and prefill a bounded
slice.

The phases contain their own failures (a row's, a group's: see :mod:`.generator`).  Should an
exception escape them anyway, the thread does not die silently: it logs why, ends every
admitted and queued request with :class:`~afm_struct.errors.UnavailableError` (503), refuses
new ones at once, and :attr:`Scheduler.failure` says why (``/health`` answers unhealthy).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

from ..errors import AfmError, OverloadedError, UnavailableError, internal_error
from .generator import Finished, FinishReason, GenerationEvent, GenerationRequest, Generator, Timings, Usage
from .heap import IdleRelease
from .join_wait import JoinWait
from .loop_mailbox import held_wakeups, mailbox_for

log = logging.getLogger("afm_struct")


class Handle:
    """A submitted request: its events, and a cooperative cancel switch."""

    def __init__(self, request: GenerationRequest, loop: asyncio.AbstractEventLoop | None) -> None:
        self.request = request
        self.cancel_event = threading.Event()
        self.finished = threading.Event()
        self.submitted = time.perf_counter()
        # A live request counted in Scheduler.live_waiting until its first event (set and
        # cleared under the scheduler's lock).
        self.live_waiting = False
        self._loop = loop
        self._async_q: asyncio.Queue[GenerationEvent] | None = asyncio.Queue() if loop is not None else None
        # One wake-up of the loop carries every event posted since its last (all streams).
        self._mailbox = mailbox_for(loop) if loop is not None else None
        self._sync_q: queue.Queue[GenerationEvent] = queue.Queue()

    def cancel(self) -> None:
        """Ask the scheduler to stop this request at its next step."""
        self.cancel_event.set()

    def _deliver(self, event: GenerationEvent) -> None:
        if isinstance(event, Finished):
            self.finished.set()
        if self._mailbox is not None and self._async_q is not None:
            # A closed loop (client gone) has nothing to deliver to: the request stops.
            self._mailbox.post(self._async_q.put_nowait, event, self.cancel_event.set)
        else:
            self._sync_q.put(event)

    def __iter__(self) -> Iterator[GenerationEvent]:
        while True:
            event = self._sync_q.get()
            yield event
            if isinstance(event, Finished):
                return

    def ready(self) -> int:
        """How many events are already delivered to the loop and not yet read: the next read
        of :meth:`events` returns at once while this is positive (a stream coalesces its writes
        on it: server/run.py)."""
        return self._async_q.qsize() if self._async_q is not None else self._sync_q.qsize()

    async def events(self) -> AsyncIterator[GenerationEvent]:
        """The events as an async iterator (the handle must have been made with a loop)."""
        assert self._async_q is not None, "submit(..., loop=...) for async iteration"
        while True:
            event = await self._async_q.get()
            yield event
            if isinstance(event, Finished):
                return


@dataclass(frozen=True)
class SchedulerLimits:
    """Admission limits: sequences stepped together, and requests waiting behind them."""

    max_active: int = 8
    max_queue: int = 16
    retry_after_s: int = 1
    # Longest a running batch holds its next pass for requests replacing finished rows (only
    # while clients are seen to send them that fast; 0 turns it off): see join_wait.py.
    join_wait_ms: float = 40.0
    # Idle this long, the heap's free pages go back to the OS (afm_struct/decoding/heap.py; < 0: never).
    idle_release_s: float = 2.0


class Scheduler:
    """The model-owning thread."""

    def __init__(self, generator: Generator, limits: SchedulerLimits | None = None) -> None:
        self.generator = generator
        self.limits = limits or SchedulerLimits()
        # The batch the generator decodes together is the scheduler's active set.
        generator.batch.max_rows = self.limits.max_active
        # None: the stop's wake-up (the thread may be blocked waiting for an arrival).
        self._incoming: queue.Queue[Handle | None] = queue.Queue()
        self._waiting: list[Handle] = []
        self._lock = threading.Lock()
        self._pending = 0
        # Live (not background) requests submitted whose first event has not come yet: while
        # any wait, the batch runner starts no new line (server/batches/runner.py).
        self._live_waiting = 0
        # Background requests (batch lines) submitted and not finished: the rest of _pending is live.
        self._background = 0
        # A live request started since the last iteration began (the scheduler thread's own).
        self._live_started = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.join_wait = JoinWait(max_wait_s=self.limits.join_wait_ms / 1e3)
        self.idle_release = IdleRelease(self.limits.idle_release_s)
        # Requests that joined the pass right after the rows they replaced finished.
        self.refill_joins = 0
        # Why the thread died (None while it serves); set once, under the lock.
        self._failure: str | None = None
        # Handles given to the generator and not ended yet (the scheduler thread's own).
        self._running: set[Handle] = set()

    def start(self) -> None:
        """Start the stepping thread (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="afm-scheduler", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Cancel everything and stop the thread."""
        self._stop.set()
        self._incoming.put(None)
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    @property
    def failure(self) -> str | None:
        """Why the scheduler cannot serve (its thread died), or None while it can."""
        with self._lock:
            if self._failure is not None:
                return self._failure
        thread = self._thread
        if thread is not None and not thread.is_alive() and not self._stop.is_set():
            return "the scheduler thread is not running"
        return None

    @property
    def load(self) -> tuple[int, int]:
        """(active or waiting requests, capacity)."""
        with self._lock:
            return self._pending, self.limits.max_active + self.limits.max_queue

    @property
    def live_in_flight(self) -> int:
        """Live (not background) requests submitted and not finished: running or waiting."""
        with self._lock:
            return self._pending - self._background

    @property
    def live_waiting(self) -> int:
        """Live requests submitted and not yet answered their first event (a token, or the end):
        background work holds back while this is positive."""
        with self._lock:
            return self._live_waiting

    @property
    def active_rows(self) -> int:
        """Requests being generated now (the rest of :attr:`load`'s first number waits)."""
        # len() of a set another thread mutates is one atomic read in CPython: a gauge's value.
        return len(self._running)

    def submit(self, request: GenerationRequest, *,
               loop: asyncio.AbstractEventLoop | None = None) -> Handle:
        """Queue ``request``; raise :class:`OverloadedError` when full, admission errors at once."""
        self.generator.max_tokens_for(request)  # raises on context overflow before any response starts
        handle = Handle(request, loop)
        with self._lock:
            if self._failure is not None:
                raise _unavailable()
            capacity = self.limits.max_active + self.limits.max_queue
            if self._pending >= capacity:
                raise OverloadedError(
                    f"the server is busy ({self._pending} requests in flight, limit {capacity}); "
                    f"retry after {self.limits.retry_after_s}s", retry_after=self.limits.retry_after_s)
            self._pending += 1
            if request.background:
                self._background += 1
            else:
                handle.live_waiting = True
                self._live_waiting += 1
            self.join_wait.arrived(time.perf_counter())
            # Queued under the lock: a thread that dies after this sees the handle and ends it.
            self._incoming.put(handle)
        return handle

    def _run(self) -> None:
        try:
            self._serve()
        except BaseException as exc:  # whatever it was, no request may be left waiting
            self._die(exc)

    def _serve(self) -> None:
        try:
            # Measure the forward-pass cost model now, not in the middle of the first batch.
            self.generator.fixed_cost_positions()
        except Exception:  # a model that cannot run a dummy pass still serves (no batching cap)
            log.warning("could not calibrate the forward-pass cost; assuming padding is cheap")
            self.generator.fixed_positions = 1e9
        try:
            self.generator.warm_up()
        except Exception:  # only an optimization: the first batch allocates its own memory
            log.warning("could not pre-allocate the batch cache", exc_info=True)
        while not self._stop.is_set():
            self._admit(block=not self.generator.has_work)
            if self.generator.has_work:
                self._iterate()
                self.idle_release.busy(time.perf_counter())
            else:
                self.idle_release.poll(time.perf_counter())
        self._drain()

    def _iterate(self) -> None:
        """One iteration of the generator's phases, admitting replacements where rows left."""
        gen = self.generator
        if self._live_started and self._background:
            # A live request just started beside batch lines: its prompt is prefilled now, so
            # this iteration samples its first token, rather than after the batch rows' step.
            gen.prefill_some()
        self._live_started = False
        gen.join_short_tails()
        with held_wakeups():  # the step's deltas for all streams: one wake-up per loop
            freed = gen.sample_and_emit()
        if freed:  # the shared group runs on with free rows: fill them before its next pass
            self._refill(freed)
        else:
            # What arrived while this step sampled joins the pass launched now, not the one
            # after: beside busy rows that is a whole iteration sooner to a first token.
            self._admit(block=False)
        gen.join_short_tails()
        gen.launch_forward()
        gen.prefill_some()

    def _die(self, exc: BaseException) -> None:
        """An exception escaped the phases: say why, end every request, refuse new ones."""
        with self._lock:
            self._failure = f"the scheduler thread stopped after an internal error ({type(exc).__name__})"
        log.critical("the scheduler thread died; this replica now answers 503 to every request and "
                     "/health reports unhealthy until it is restarted", exc_info=exc)
        err = _unavailable()
        # Every request ends here, whatever state the generator was left in: the ones it held
        # (through their own sinks) and the ones still queued.
        ends = [(h, True) for h in self._running] + [(h, False) for h in self._waiting]
        self._waiting = []
        try:
            while True:
                queued = self._incoming.get_nowait()
                if queued is not None:
                    ends.append((queued, False))
        except queue.Empty:
            pass
        for handle, admitted in ends:
            if not handle.finished.is_set():
                self._sink_for(handle, admitted=admitted)(
                    Finished(FinishReason.ERROR, Usage(len(handle.request.prompt_ids)), Timings(), "",
                             error=err))

    def _drain(self) -> None:
        """On stop, end every request with ``cancelled`` so no consumer waits forever."""
        self._admit(block=False)
        for handle in self._waiting:
            handle.cancel()
            self._start(handle)
        self._waiting.clear()
        for seq in self.generator.active:
            seq.cancel.set()
        for _ in range(4):  # cancelled rows finish at their next step
            if not self.generator.has_work:
                break
            self.generator.step()

    def _refill(self, freed: int) -> None:
        """``freed`` rows just left the batch, which is about to launch its next pass: admit
        what waits now, and hold the pass briefly for replacements when clients send them fast."""
        started = self._admit(block=False)
        with self._lock:
            # Live requests beside batch lines: the replacement is most likely the batch
            # runner's next line, and holding the pass for it would stall the live rows.
            mixed = 0 < self._background < self._pending
            wait = 0.0 if mixed else self.join_wait.wait_s(time.perf_counter())
        deadline = time.perf_counter() + wait
        while started < freed and len(self.generator.active) < self.limits.max_active:
            left = deadline - time.perf_counter()
            if left <= 0:
                break
            started += self._admit(block=True, timeout=left)
        self.refill_joins += started

    def _admit(self, *, block: bool, timeout: float = 0.05) -> int:
        """Move arrivals to the waiting list and start what fits; return how many started."""
        started = 0
        try:
            while True:
                handle = self._incoming.get(timeout=timeout) if block else self._incoming.get_nowait()
                if handle is None:  # stop() woke the thread: take what else arrived, then return
                    block = False
                    continue
                self._waiting.append(handle)
                block = False
        except queue.Empty:
            pass
        # A request cancelled while it waits ends now, not when a slot frees.
        for handle in [h for h in self._waiting if h.cancel_event.is_set()]:
            self._waiting.remove(handle)
            self._start(handle)
        while self._waiting and len(self.generator.active) < self.limits.max_active:
            handle = self._waiting.pop(self._next_waiting())
            self._live_started |= not handle.request.background
            self._start(handle)
            started += 1
        return started

    def _next_waiting(self) -> int:
        """The index of the waiting request to start next: the first live one, else the first
        (a batch line takes a row only when no live request waits for it)."""
        return next((i for i, h in enumerate(self._waiting) if not h.request.background), 0)

    def _sink_for(self, handle: Handle, *, admitted: bool) -> Callable[[GenerationEvent], None]:
        """The event sink of ``handle``: its end frees its place (and, when it was
        ``admitted`` to the generator, a slot in the batch)."""
        def sink(event: GenerationEvent) -> None:
            if handle.live_waiting:  # a live request's first event ends its wait
                with self._lock:
                    if handle.live_waiting:
                        handle.live_waiting = False
                        self._live_waiting -= 1
            if isinstance(event, Finished):
                self._running.discard(handle)
                with self._lock:
                    self._pending -= 1
                    self._background -= handle.request.background
                    if admitted:  # a slot in the batch is free (not a request refused at the door)
                        self.join_wait.finished(time.perf_counter())
                event.timings.queued_s = time.perf_counter() - handle.submitted - (
                    event.timings.prefill_s + event.timings.decode_s)
            handle._deliver(event)

        return sink

    def _start(self, handle: Handle) -> None:
        if handle.cancel_event.is_set():
            self._sink_for(handle, admitted=False)(
                Finished(FinishReason.CANCELLED, Usage(len(handle.request.prompt_ids)), Timings(), ""))
            return
        try:
            self._running.add(handle)
            self.generator.add(handle.request, self._sink_for(handle, admitted=True), handle.cancel_event)
        except AfmError as exc:
            self._running.discard(handle)
            self._sink_for(handle, admitted=False)(
                Finished(FinishReason.ERROR, Usage(len(handle.request.prompt_ids)), Timings(), "",
                         error=exc))
        except Exception as exc:
            self._running.discard(handle)
            err = internal_error(exc, [handle.request.request_id], what="admission failed")
            self._sink_for(handle, admitted=False)(Finished(FinishReason.ERROR, Usage(), Timings(), "",
                                                            error=err))


def _unavailable() -> UnavailableError:
    return UnavailableError("the generation engine of this replica stopped after an internal error "
                            "and cannot serve requests until it is restarted; retry on another "
                            "replica (the server log says why)")
