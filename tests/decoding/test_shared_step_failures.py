"""A failure in a step several rows share, after it changed their state, ends exactly those rows
(issue 34, item 1: "a failure in any phase ends only the requests it concerns").

Each case runs the generator's phases on the scripted model, as the scheduler does: ``r0``
decodes in the shared batch group when ``r1`` and ``r2`` arrive and prefill together.  A fault
then hits one shared step *after* it changed something: prompts prefilled together whose pass
is done (their masks, their prefix-cache entries, their rows joining the batch cache), the
decode step's mask fill for a whole group, rows leaving a batch cache.  The checks:

* no phase raises (an exception out of a phase stops the scheduler thread: every request of
  the replica then ends 503 and ``/health`` says unhealthy);
* the requests the step concerned end ``error`` with ``generation_failed``, whose message says
  nothing of the fault; a group whose batch cache was being changed concerns all its rows;
* every other request ends exactly as it does alone (the script, ``stop``), and so does a
  request sent afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from afm_struct.decoding.generator import Finished, GenerationRequest, Generator
from afm_struct.decoding.sampling import SamplingParams
from afm_struct.grammar.compiler import compile_constraint
from afm_struct.grammar.spec import RegexRequest
from afm_struct.testing import scripted_loaded_model

from .faults import FaultyMatcher

SCRIPT = "alpha beta gamma delta epsilon zeta eta theta"
FAULT = "injected fault <state>internals</state>"


class Fault:
    """Wraps ``owner.attr``; its ``nth`` call while ``armed`` fails, before or after running."""

    def __init__(self, owner: Any, attr: str, *, nth: int = 1, after: bool = False) -> None:
        self.armed = False
        self.calls = 0
        self.fired = False
        inner = getattr(owner, attr)

        def faulty(*args: Any, **kwargs: Any) -> Any:
            if not self.armed or self.fired:
                return inner(*args, **kwargs)
            self.calls += 1
            if self.calls < nth:
                return inner(*args, **kwargs)
            self.fired = True
            if after:  # the step changed its state, then failed (a half-done change)
                inner(*args, **kwargs)
            raise RuntimeError(FAULT)

        setattr(owner, attr, faulty)


def _request(tokenizer: Any, i: int, constraint: Any = None) -> GenerationRequest:
    prompt = tokenizer.encode_chat([{"role": "user", "content": f"a question, number {i}"}])
    return GenerationRequest(prompt, SamplingParams(temperature=0, max_tokens=40),
                             constraint=constraint, request_id=f"r{i}")


def _run(gen: Generator, events: dict[str, list[Any]]) -> None:
    for _ in range(200):
        if not gen.has_work:
            return
        gen.step()  # raises if a phase let the fault escape
    raise AssertionError("the requests never ended")


def _final(events: list[Any]) -> Finished:
    ends = [e for e in events if isinstance(e, Finished)]
    assert len(ends) == 1, events
    return ends[0]


def _check(events: dict[str, list[Any]], concerned: set[str]) -> None:
    for rid, evs in events.items():
        final = _final(evs)
        if rid in concerned:
            assert final.reason == "error", (rid, final.reason, final.text)
            assert final.error is not None and final.error.code == "generation_failed"
            assert "internals" not in final.error.message and "injected" not in final.error.message
        else:
            assert (final.reason, final.text) == ("stop", SCRIPT), (rid, final)


def _setup(tokenizer: Any) -> tuple[Generator, dict[str, list[Any]], Callable[..., None]]:
    gen = Generator.from_loaded(scripted_loaded_model(tokenizer, SCRIPT))
    events: dict[str, list[Any]] = {}

    def add(i: int, constraint: Any = None) -> None:
        events[f"r{i}"] = []
        gen.add(_request(tokenizer, i, constraint), events[f"r{i}"].append)

    add(0)
    gen.step()
    gen.step()
    assert gen.decoding == 1  # r0 decodes in the shared group
    return gen, events, add


# (what fails, where it is, whether it fails after changing its state, the requests concerned)
TOGETHER_FAULTS = {
    # The masks of the prompts prefilled together, as one call (not one row's grammar).
    "masks": ("fill_mask", "fill_rows", False, {"r1", "r2"}),
    # Their KV state kept for prefix reuse, the first already kept.
    "prefix_store": ("prefix_cache", "store", False, {"r1", "r2"}, 2),
    # Their rows appended to the running group's batch cache, which then failed: the cache of
    # the group r0 decodes in is half changed.
    "join": ("cache_ops", "extend", True, {"r0", "r1", "r2"}),
}


@pytest.mark.parametrize("case", sorted(TOGETHER_FAULTS))
def test_a_failure_after_the_pass_of_prompts_prefilled_together_ends_those_requests(tokenizer, case):
    gen, events, add = _setup(tokenizer)
    target, attr, after, concerned, *nth = TOGETHER_FAULTS[case]
    owners = {"fill_mask": gen.fill_mask, "prefix_cache": gen.prefiller.prefix_cache,
              "cache_ops": gen.cache_ops}
    fault = Fault(owners[target], attr, nth=nth[0] if nth else 1, after=after)
    together = gen.prefiller._prefill_together

    def armed(seqs: list[Any]) -> int:
        fault.armed = True
        try:
            return together(seqs)
        finally:
            fault.armed = False

    gen.prefiller._prefill_together = armed  # type: ignore[method-assign]
    add(1)
    add(2)
    _run(gen, events)
    assert fault.fired
    _check(events, concerned)
    add(3)
    _run(gen, events)
    _check(events, concerned)


def test_a_failing_mask_fill_of_a_whole_group_ends_that_group_only(tokenizer):
    """The decode step fills the group's masks in one call while its pass runs; that call (not
    one row's grammar: the bitmask it allocates) fails.  Before, the exception left
    ``launch_forward``: the scheduler thread died and every request got a 503."""
    gen, events, add = _setup(tokenizer)
    fault = Fault(gen.fill_mask, "fill_rows")
    add(1)  # waiting for prefill when the fault hits r0's group: not concerned
    launch = gen.launch_forward

    def armed() -> None:
        fault.armed = True
        try:
            launch()
        finally:
            fault.armed = False

    gen.launch_forward = armed  # type: ignore[method-assign]
    _run(gen, events)
    assert fault.fired
    _check(events, {"r0"})


def test_a_batch_cache_failing_to_let_rows_go_ends_its_group_only(tokenizer):
    """r1 and r2 decode with r0; r1's grammar fails while its mask is filled, so it leaves the
    batch outside the decode step, and the batch cache fails part way through moving rows.
    Before, the exception left ``launch_forward`` (the scheduler died)."""
    gen, events, add = _setup(tokenizer)
    regex = compile_constraint(tokenizer, RegexRequest("[a-z ]+"))
    add(1, regex)
    add(2)
    gen.step()
    gen.step()
    assert gen.decoding == 3
    seq = next(s for s in gen.batch.rows() if s.request.request_id == "r1")
    seq.matcher = FaultyMatcher(seq.matcher, "mask_raise", 1)
    fault = Fault(gen.cache_ops, "filter", after=True)
    fault.armed = True
    add(4)  # waiting for prefill: not concerned
    _run(gen, events)
    assert fault.fired and seq.matcher.trigger.fired
    _check(events, {"r0", "r1", "r2"})


# The nth look-up of the prefix cache fails while r1 and r2 wait: where it lands, who it concerns.
PLANNING_FAULTS = {
    1: {"r1"},        # r1's short-tail check (join_short_tails): r1 alone
    3: {"r1", "r2"},  # planning the prefix both share (its pass would have been theirs)
    4: set(),         # picking prompts to prefill together: nothing changed, they go one by one
}


@pytest.mark.parametrize("nth", sorted(PLANNING_FAULTS))
def test_a_failure_while_planning_prefill_ends_the_prompts_it_concerns(tokenizer, nth):
    """Before, these steps had no handler: the exception left the phase (the scheduler died)."""
    gen, events, add = _setup(tokenizer)
    fault = Fault(gen.prefiller.prefix_cache, "peek", nth=nth)
    fault.armed = True
    add(1)
    add(2)
    _run(gen, events)
    assert fault.fired
    _check(events, PLANNING_FAULTS[nth])
