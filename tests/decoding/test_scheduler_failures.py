"""The scheduler never dies silently: failures end only the requests they concern, and a thread
that dies anyway fails every waiting and future request at once and says why (issue 34)."""

from __future__ import annotations

import threading
from typing import Any

import mlx.core as mx

from afm_struct.decoding.generator import Finished, GenerationRequest, Generator
from afm_struct.decoding.prefix_cache import common_prefix
from afm_struct.decoding.sampling import SamplingParams
from afm_struct.decoding.scheduler import Scheduler, SchedulerLimits
from afm_struct.errors import UnavailableError
from afm_struct.models.loader import LoadedModel
from afm_struct.testing import Script, ScriptedModel, scripted_loaded_model

# A generous bound on how long a request may take to end here: reaching it means it hangs.
HANG_S = 30.0
SYSTEM = ("You are a careful assistant for a travel agency. Answer briefly, in English, and "
          "never invent prices, dates or places that the customer did not mention.")


class BrokenModel(ScriptedModel):
    """The scripted model, failing every forward pass while ``broken`` is set (as a model
    whose arrays belong to another thread's stream did: every call raised)."""

    broken = False
    shapes: list[tuple[int, ...]]

    def __call__(self, inputs: mx.array, cache: Any = None) -> mx.array:
        self.shapes.append(tuple(inputs.shape))
        if self.broken:
            raise RuntimeError("There is no Stream(cpu, 0) in current thread.")
        return super().__call__(inputs, cache)


def broken_loaded(tokenizer: Any, text: str) -> tuple[LoadedModel, BrokenModel]:
    loaded = scripted_loaded_model(tokenizer, text)
    model = BrokenModel(tokenizer, Script(text))
    model.shapes = []
    return LoadedModel(model=model, tokenizer=tokenizer, info=loaded.info), model  # type: ignore[arg-type]


def ended(handle: Any) -> Finished:
    """The handle's Finished, or an assertion error if it does not come (a hang)."""
    assert handle.finished.wait(HANG_S), "the request never ended"
    events = list(handle)
    assert isinstance(events[-1], Finished)
    return events[-1]


def test_a_failing_shared_prefix_pass_ends_its_requests_and_the_scheduler_serves_on(tokenizer):
    """8 requests sharing a system prompt: their shared prefix is computed once, and that pass
    fails.  Before, the exception escaped the scheduler thread: every request hung."""
    loaded, model = broken_loaded(tokenizer, "fine, thanks")
    sched = Scheduler(Generator.from_loaded(loaded), SchedulerLimits(max_active=8))
    prompts = [tokenizer.encode_chat([{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": f"question number {i}: where to?"}])
               for i in range(8)]
    shared = min(common_prefix(prompts[0], p) for p in prompts[1:])
    model.broken = True
    # Queued before the thread starts: its first admission takes all 8 together.
    handles = [sched.submit(GenerationRequest(p, SamplingParams(temperature=0, max_tokens=8),
                                              request_id=f"r{i}")) for i, p in enumerate(prompts)]
    sched.start()
    try:
        finals = [ended(h) for h in handles]
        assert (1, shared) in model.shapes  # the shared-prefix pass ran (and failed)
        assert all(f.reason == "error" and f.error is not None for f in finals)
        assert "Stream" not in finals[0].error.message  # the engine's words stay in the log
        assert sched.failure is None and sched.load[0] == 0
        model.broken = False
        again = ended(sched.submit(GenerationRequest(prompts[0], SamplingParams(temperature=0))))
        assert (again.reason, again.text) == ("stop", "fine, thanks")
    finally:
        sched.stop()


def test_a_dead_scheduler_fails_every_request_fast_and_says_why(tokenizer, caplog):
    """An exception that escapes the phases (a bug) stops the thread: the requests it held (even
    one the generator lost track of) and those queued end with UnavailableError, new ones are
    refused at submit, failure says why."""
    loaded = scripted_loaded_model(tokenizer, Script("word " * 40, delay_s=0.01))
    gen = Generator.from_loaded(loaded)
    sched = Scheduler(gen, SchedulerLimits(max_active=1, max_queue=4))
    prompt = tokenizer.encode_chat([{"role": "user", "content": "go"}])
    sched.start()
    running = sched.submit(GenerationRequest(prompt, SamplingParams(temperature=0, max_tokens=40)))
    queued = sched.submit(GenerationRequest(prompt, SamplingParams(temperature=0, max_tokens=40)))
    started = threading.Event()
    original = gen.sample_and_emit

    def boom() -> int:
        if gen.decoding and started.is_set():
            gen.batch.groups.clear()  # the bug lost track of the running row
            raise RuntimeError("a bug in the bookkeeping")
        return original()

    gen.sample_and_emit = boom  # type: ignore[method-assign]
    try:
        assert sched.failure is None
        started.set()
        for handle in (running, queued):
            final = ended(handle)
            assert final.reason == "error" and isinstance(final.error, UnavailableError)
            assert final.error.status == 503 and "bookkeeping" not in final.error.message
        assert sched.failure is not None and "RuntimeError" in sched.failure
        assert sched.load[0] == 0
        try:
            sched.submit(GenerationRequest(prompt))
        except UnavailableError as exc:
            assert exc.status == 503
        else:
            raise AssertionError("a dead scheduler accepted a request")
        assert any("scheduler thread died" in r.getMessage() for r in caplog.records)
    finally:
        sched.stop()
