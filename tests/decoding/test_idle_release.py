"""An idle server gives its free heap back: once per idle spell, never while it works."""

from __future__ import annotations

import threading
import time

from afm_struct.decoding.generator import Finished, GenerationRequest, Generator
from afm_struct.decoding.heap import IdleRelease
from afm_struct.decoding.sampling import SamplingParams
from afm_struct.decoding.scheduler import Scheduler, SchedulerLimits
from afm_struct.testing import Script, scripted_loaded_model


class Counting:
    def __init__(self) -> None:
        self.calls = 0
        self.done = threading.Event()

    def __call__(self) -> bool:
        self.calls += 1
        self.done.set()
        return True


def test_one_release_per_idle_spell_and_none_without_work() -> None:
    release = Counting()
    idle = IdleRelease(2.0, release=release)
    assert not idle.poll(100.0)  # nothing ran yet: nothing to give back
    idle.busy(10.0)
    assert not idle.poll(11.9)  # idle, but not for long enough
    assert idle.poll(12.0)
    assert release.done.wait(5)
    assert not idle.poll(50.0)  # the same spell: one trim is enough
    idle.busy(60.0)
    idle.busy(61.0)
    assert not idle.poll(62.5)  # counted from the last work, not the first
    assert idle.poll(63.0)
    assert idle.releases == 2


def test_a_negative_delay_never_releases() -> None:
    idle = IdleRelease(-1.0, release=Counting())
    idle.busy(0.0)
    assert not idle.poll(1e9)


def test_the_scheduler_releases_after_traffic_goes_quiet(tokenizer) -> None:
    gen = Generator.from_loaded(scripted_loaded_model(tokenizer, Script("a b c")))
    sched = Scheduler(gen, SchedulerLimits(idle_release_s=0.2))
    release = Counting()
    sched.idle_release._release = release
    sched.start()
    try:
        time.sleep(0.5)
        assert release.calls == 0  # warm-up is not traffic
        prompt = tokenizer.encode_chat([{"role": "user", "content": "go"}])
        handle = sched.submit(GenerationRequest(prompt, SamplingParams(temperature=0)))
        events = list(handle)
        assert isinstance(events[-1], Finished) and events[-1].text == "a b c"
        assert release.done.wait(10), "the idle scheduler never gave its heap back"
        time.sleep(0.5)
        assert release.calls == 1
    finally:
        sched.stop()
