"""The scheduler thread: admission limits, cancellation while queued, draining on stop."""

from __future__ import annotations

import threading
import time

import pytest

from afm_struct.decoding.generator import Finished, GenerationRequest, Generator, TextDelta
from afm_struct.decoding.sampling import SamplingParams
from afm_struct.decoding.scheduler import Scheduler, SchedulerLimits
from afm_struct.errors import ContextOverflowError, OverloadedError
from afm_struct.testing import Script, scripted_loaded_model


@pytest.fixture
def prompt(tokenizer):
    return tokenizer.encode_chat([{"role": "user", "content": "go"}])


def make(tokenizer, script: Script, **limits) -> Scheduler:
    gen = Generator.from_loaded(scripted_loaded_model(tokenizer, script))
    sched = Scheduler(gen, SchedulerLimits(**limits))
    sched.start()
    return sched


def final(handle) -> Finished:
    events = list(handle)
    assert isinstance(events[-1], Finished)
    return events[-1]


def test_requests_run_concurrently_and_finish(tokenizer, prompt):
    sched = make(tokenizer, Script("a b c d e"), max_active=4)
    try:
        handles = [sched.submit(GenerationRequest(prompt, SamplingParams(temperature=0))) for _ in range(4)]
        assert [final(h).text for h in handles] == ["a b c d e"] * 4
        assert sched.load == (0, 4 + 16)
    finally:
        sched.stop()


def test_full_queue_is_rejected_before_anything_starts(tokenizer, prompt):
    sched = make(tokenizer, Script("word " * 50, delay_s=0.02), max_active=1, max_queue=1)
    try:
        a = sched.submit(GenerationRequest(prompt, SamplingParams(temperature=0)))
        b = sched.submit(GenerationRequest(prompt, SamplingParams(temperature=0)))
        with pytest.raises(OverloadedError) as err:
            sched.submit(GenerationRequest(prompt, SamplingParams(temperature=0)))
        assert err.value.status == 503 and err.value.retry_after == 1
        a.cancel()
        b.cancel()
        assert final(a).reason == final(b).reason == "cancelled"
    finally:
        sched.stop()


def test_context_overflow_is_raised_at_submit(tokenizer):
    gen = Generator.from_loaded(scripted_loaded_model(tokenizer, "x", context_length=8))
    sched = Scheduler(gen)
    with pytest.raises(ContextOverflowError):
        sched.submit(GenerationRequest(tokenizer.encode("many words " * 10)))


def test_cancel_while_queued_ends_at_once(tokenizer, prompt):
    sched = make(tokenizer, Script("word " * 60, delay_s=0.02), max_active=1, max_queue=2)
    try:
        running = sched.submit(GenerationRequest(prompt, SamplingParams(temperature=0)))
        queued = sched.submit(GenerationRequest(prompt, SamplingParams(temperature=0)))
        time.sleep(0.1)
        t0 = time.perf_counter()
        queued.cancel()
        assert queued.finished.wait(1.0)
        assert time.perf_counter() - t0 < 0.5
        assert final(queued).reason == "cancelled"
        assert not running.finished.is_set()
        running.cancel()
    finally:
        sched.stop()


def test_stop_ends_every_request_with_cancelled(tokenizer, prompt):
    sched = make(tokenizer, Script("word " * 200, delay_s=0.01), max_active=2, max_queue=4)
    handles = [sched.submit(GenerationRequest(prompt, SamplingParams(temperature=0))) for _ in range(4)]
    time.sleep(0.2)
    done = threading.Event()
    finals: list[Finished] = []

    def consume():
        for h in handles:
            finals.append(final(h))
        done.set()

    threading.Thread(target=consume, daemon=True).start()
    sched.stop()
    assert done.wait(5.0), "a consumer was left waiting after stop()"
    assert [f.reason for f in finals] == ["cancelled"] * 4


def test_events_arrive_in_order_per_request(tokenizer, prompt):
    sched = make(tokenizer, Script("one two three"), max_active=2)
    try:
        h = sched.submit(GenerationRequest(prompt, SamplingParams(temperature=0)))
        events = list(h)
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "one two three"
        assert isinstance(events[-1], Finished) and events[-1].reason == "stop"
    finally:
        sched.stop()


def test_a_live_request_starts_before_background_ones_that_waited_longer(tokenizer, prompt):
    # One row, held by a long request; two batch lines (background) queue, then a live one.
    sched = make(tokenizer, Script("word " * 40, delay_s=0.01), max_active=1)
    try:
        first = sched.submit(GenerationRequest(prompt, SamplingParams(temperature=0)))
        background = [sched.submit(GenerationRequest(prompt, SamplingParams(temperature=0, max_tokens=4),
                                                     background=True)) for _ in range(2)]
        assert sched.live_in_flight == 1 and sched.live_waiting == 1
        next(iter(first))  # its first token: it no longer waits
        assert sched.live_waiting == 0
        live = sched.submit(GenerationRequest(prompt, SamplingParams(temperature=0, max_tokens=4)))
        assert sched.live_waiting == 1 and sched.live_in_flight == 2
        first.cancel()
        assert final(live).reason == "length"
        # The row went to the live request: neither batch line has run to its end yet.
        assert not any(h.finished.is_set() for h in background)
        assert [final(h).reason for h in background] == ["length", "length"]
        assert sched.live_waiting == 0 and sched.live_in_flight == 0 and sched.load[0] == 0
    finally:
        sched.stop()
