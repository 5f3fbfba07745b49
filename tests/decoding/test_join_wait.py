"""Holding a batch's next pass for the requests that replace finished rows (join_wait.py)."""

from __future__ import annotations

import threading

import pytest

from afm_struct.decoding.generator import Finished, GenerationRequest, Generator, TextDelta
from afm_struct.decoding.join_wait import JoinWait
from afm_struct.decoding.sampling import SamplingParams
from afm_struct.decoding.scheduler import Scheduler, SchedulerLimits
from afm_struct.testing import Script, scripted_loaded_model

from .phases import iterate

# -- the statistics -------------------------------------------------------------------------


def closed_loop(jw: JoinWait, gaps: list[float | None], *, start: float = 0.0, period: float = 1.0) -> float:
    """Finishes ``period`` apart, each followed by an arrival ``gap`` later (None: never)."""
    now = start
    for gap in gaps:
        jw.finished(now)
        if gap is not None:
            jw.arrived(now + gap)
        now += period
    return now


def test_no_history_no_wait():
    jw = JoinWait(max_wait_s=0.04)
    assert jw.wait_s(0.0) == 0.0
    closed_loop(jw, [0.01] * 3)
    assert jw.wait_s(10.0) == 0.0  # fewer finishes seen than min_history


def test_fast_refills_wait_about_as_long_as_they_took():
    jw = JoinWait(max_wait_s=0.04, margin_s=0.005)
    now = closed_loop(jw, [0.010, 0.012, 0.015, 0.011, 0.013, 0.014])
    wait = jw.wait_s(now)
    assert 0.015 <= wait <= 0.021  # the slowest recent refill plus the margin, not the maximum


def test_wait_never_exceeds_the_maximum():
    jw = JoinWait(max_wait_s=0.04, margin_s=0.005)
    now = closed_loop(jw, [0.039] * 8)
    assert jw.wait_s(now) == pytest.approx(0.04)


def test_slow_or_missing_refills_turn_waiting_off():
    jw = JoinWait(max_wait_s=0.04)
    now = closed_loop(jw, [0.01] * 8)
    assert jw.wait_s(now) > 0
    # Open-loop traffic: most finishes are followed by nothing soon (or by something late).
    now = closed_loop(jw, [None, 0.1, None, None, 0.01, None, None, None], start=now)
    assert jw.wait_s(now) == 0.0


def test_unrefilled_finishes_count_as_misses_once_expired():
    jw = JoinWait(max_wait_s=0.04, window=8)
    now = closed_loop(jw, [0.01] * 8)
    for _ in range(8):  # a draining batch: rows end, nobody replaces them
        jw.finished(now)
        now += 0.001
    assert jw.wait_s(now) > 0  # not judged yet: a replacement may still come
    assert jw.wait_s(now + 1.0) == 0.0


def test_zero_maximum_is_off():
    jw = JoinWait(max_wait_s=0.0)
    now = closed_loop(jw, [0.001] * 10)
    assert not jw.enabled and jw.wait_s(now) == 0.0


# -- the refill point between the generator's phases ---------------------------------------


def first_delta_step(tokenizer, *, hook: bool) -> tuple[int, int, int]:
    """Steps of A's finish and of C's first token (C added when A's row leaves the batch), and
    the forward calls of the finish step."""
    loaded = scripted_loaded_model(
        tokenizer, Script(lambda ids: "a b" if "short" in tokenizer.decode(ids) else "w " * 30))
    gen = Generator.from_loaded(loaded)

    def req(text: str) -> GenerationRequest:
        return GenerationRequest(tokenizer.encode_chat([{"role": "user", "content": text}]),
                                 SamplingParams(temperature=0))

    events: dict[str, list] = {"A": [], "B": [], "C": []}
    gen.add(req("long"), events["B"].append)
    for _ in range(3):  # B decoding, and the prompt now in the prefix cache
        gen.step()
    gen.add(req("short"), events["A"].append)
    added = []

    def refill(freed: int) -> None:
        if added:  # C itself finishing: nothing more to add
            return
        assert freed == 1
        gen.add(req("short"), events["C"].append)
        added.append(step)

    step, finish_step, first_c, calls = 0, None, None, 0
    while gen.has_work and step < 100:
        before = loaded.model.calls
        iterate(gen, refill if hook else None)
        step += 1
        if finish_step is None and events["A"] and isinstance(events["A"][-1], Finished):
            finish_step, calls = step, loaded.model.calls - before
            if not hook:
                gen.add(req("short"), events["C"].append)
        if first_c is None and any(isinstance(e, TextDelta) for e in events["C"]):
            first_c = step
    assert finish_step is not None and first_c is not None
    assert "".join(e.text for e in events["C"] if isinstance(e, TextDelta)) == "a b"
    assert added == ([finish_step - 1] if hook else [])  # refilled in the iteration A finished in
    return finish_step, first_c, calls


def test_a_request_added_when_a_row_leaves_rides_the_next_pass(tokenizer):
    finish, first, calls = first_delta_step(tokenizer, hook=True)
    assert first == finish + 1
    assert calls == 1  # its prompt tail went into the batch's pass, not a pass of its own
    # Added after the step instead, it waits for the pass that step launched: one step later.
    finish, first, calls = first_delta_step(tokenizer, hook=False)
    assert first == finish + 2


# -- the scheduler --------------------------------------------------------------------------


def scripted_scheduler(tokenizer, **limits) -> Scheduler:
    script = Script(lambda ids: "a b" if "short" in tokenizer.decode(ids) else "w " * 80, delay_s=0.03)
    sched = Scheduler(Generator.from_loaded(scripted_loaded_model(tokenizer, script)),
                      SchedulerLimits(**limits))
    sched.start()
    return sched


def req(tokenizer, text: str) -> GenerationRequest:
    return GenerationRequest(tokenizer.encode_chat([{"role": "user", "content": text}]),
                             SamplingParams(temperature=0))


def text_of(handle) -> str:
    events = list(handle)
    assert isinstance(events[-1], Finished)
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def test_queued_request_takes_a_freed_slot_before_the_next_pass(tokenizer):
    sched = scripted_scheduler(tokenizer, max_active=2, join_wait_ms=0)
    try:
        long = sched.submit(req(tokenizer, "long"))
        short = sched.submit(req(tokenizer, "short"))
        queued = sched.submit(req(tokenizer, "short queued"))  # waits: the batch is full
        assert text_of(short) == "a b" and text_of(queued) == "a b"
        assert sched.refill_joins >= 1
        long.cancel()
        assert list(long)[-1].reason == "cancelled"
    finally:
        sched.stop()


def closed_loop_client(sched: Scheduler, tokenizer, n: int) -> list[str]:
    """One worker sending its next request as soon as the previous one ends."""
    texts = []
    for i in range(n):
        texts.append(text_of(sched.submit(req(tokenizer, f"short {i}"))))
    return texts


def test_closed_loop_replacements_join_the_pass_after_the_finish(tokenizer):
    sched = scripted_scheduler(tokenizer, max_active=2, join_wait_ms=200)
    try:
        long = sched.submit(req(tokenizer, "long"))
        texts: list[str] = []
        worker = threading.Thread(target=lambda: texts.extend(closed_loop_client(sched, tokenizer, 10)))
        worker.start()
        worker.join(30)
        assert texts == ["a b"] * 10
        # After the first finishes teach it the refill gap, replacements join at the refill.
        assert sched.refill_joins >= 4
        long.cancel()
        list(long)
    finally:
        sched.stop()


def test_without_join_wait_replacements_wait_for_the_pass_in_flight(tokenizer):
    sched = scripted_scheduler(tokenizer, max_active=2, join_wait_ms=0)
    try:
        long = sched.submit(req(tokenizer, "long"))
        assert closed_loop_client(sched, tokenizer, 6) == ["a b"] * 6
        assert sched.refill_joins <= 1  # only by the luck of a thread switch
        long.cancel()
        list(long)
    finally:
        sched.stop()
