"""One row's failure ends that row only: random traffic with faults injected into random rows.

The traffic machine of randomized.py, plus a rule that arms a fault (faults.py) in one running
or prefilling request: its matcher fails while computing a mask (raising, or stopping silently
as llguidance does), rejects a token it allowed, runs out of its budgets, fails computing the
forced run or answering whether it is finished; or its sampler, its budget closer or its event
sink fails.  Faults fire at a random later call, so they land in every phase a row goes through:
its first mask at prefill (alone, or in prompts prefilled together), tail joins, the decode
step's mask fill after the forward pass, sampling, advancing and emitting.

At the end, besides everything randomized.py checks:

* a request whose fault fired ends ``error`` (or ``cancelled``, when cancelled first), with an
  :class:`AfmError` that names no internals (a budget stop is a ``grammar_too_complex``
  :class:`GrammarLimitError`, anything else ``generation_failed``); what it emitted before is a
  prefix of what it emits alone (scripted model);
* every other request ends exactly as it does alone on a fresh generator (scripted model: text
  and finish reason; real model, greedy: the same, a near tie excepted), so the batch went on
  as if the broken row had never been there.

Without the isolation a fault ended every row of the batch with ``error``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule, run_state_machine_as_test

from afm_struct.errors import AfmError, GenerationError, GrammarLimitError
from afm_struct.testing import Script, scripted_loaded_model

from .faults import FAULTS, MARK, Trigger, applicable, arm
from .randomized import Tracked, TrafficMachine, machine_settings
from .test_randomized import _script_text


class FaultMachine(TrafficMachine):
    """Random traffic, and faults in random rows at random steps."""

    # Across a run's examples: which faults fired, and how many broken rows ended in error
    # (the test checks the faults were not all dodged).
    fired_kinds: ClassVar[dict[str, int]]
    errors_seen: ClassVar[int] = 0

    def __init__(self) -> None:
        super().__init__()
        self.faults: dict[str, tuple[str, Trigger]] = {}  # request id -> (fault, trigger)
        self.arrival_faults: list[tuple[int, int]] = []

    @precondition(lambda self: self.gen is not None and bool(self.gen.active))
    @rule(plans=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 10_000), st.integers(1, 6)),
                         min_size=1, max_size=4))
    def inject(self, plans: list[tuple[int, int, int]]) -> None:
        """Arm a fault in up to four running or prefilling rows."""
        assert self.gen is not None
        for pick, kind, after in plans:
            live = [s for s in self.gen.active if not s.done]
            seq = live[pick % len(live)]
            if seq.request.request_id in self.faults:
                continue
            kinds = applicable(seq)
            fault = kinds[kind % len(kinds)]
            self.faults[seq.request.request_id] = (fault, arm(seq, fault, after))

    @rule(plans=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 3)), max_size=4))
    def plan_on_arrival(self, plans: list[tuple[int, int]]) -> None:
        """The next requests admitted get a fault at once (their first mask is prefill's)."""
        self.arrival_faults.extend(plans)

    def admit(self, t: Tracked) -> None:
        super().admit(t)
        if not self.arrival_faults:
            return
        assert self.gen is not None
        seq = next((s for s in self.gen.prefiller.waiting if s.request is t.request), None)
        if seq is None:  # ended at admission (cancelled before it started)
            return
        kind, after = self.arrival_faults.pop(0)
        kinds = applicable(seq)
        fault = kinds[kind % len(kinds)]
        self.faults[t.request.request_id] = (fault, arm(seq, fault, after))

    def fired(self, t: Tracked) -> str | None:
        """The fault that broke ``t``, if one did."""
        fault = self.faults.get(t.request.request_id)
        return fault[0] if fault is not None and fault[1].fired else None

    def check_end(self, t: Tracked, got: Any) -> None:
        fault = self.fired(t)
        if fault is None:
            super().check_end(t, got)
            return
        assert got.reason in ("error", "cancelled"), (t.request.request_id, fault, got.reason)
        if got.reason == "cancelled":
            assert t.cancel.is_set()
            return
        err = got.error
        assert isinstance(err, AfmError), (fault, err)
        expected = GrammarLimitError if fault == "over_limits" else GenerationError
        assert type(err) is expected, (fault, type(err), err.message)
        assert MARK not in err.message and "<state>" not in err.message, err.message
        assert got.grammar_complete is not True

    def compared(self, t: Tracked) -> bool:
        return super().compared(t) and self.fired(t) is None

    def teardown(self) -> None:
        super().teardown()
        for t in self.tracked:
            fault = self.fired(t)
            if fault is not None:
                self.fired_kinds[fault] = self.fired_kinds.get(fault, 0) + 1
                type(self).errors_seen += t.events[-1].reason == "error"
        if self.gen is None or not self.exact:
            return
        for t in self.tracked:  # a broken row's text so far is the start of its own output
            if self.fired(t) is not None and not t.cancel.is_set():
                alone, _ = self.alone(t)
                assert alone.text.startswith(t.events[-1].text), (t.request.request_id,
                                                                  t.events[-1].text, alone.text)


@pytest.fixture
def scripted_faults(tokenizer):
    class Scripted(FaultMachine):
        loaded = scripted_loaded_model(tokenizer, Script(_script_text))
        fired_kinds: ClassVar[dict[str, int]] = {}

    return Scripted


def test_faults_end_only_their_own_row_scripted(scripted_faults):
    run_state_machine_as_test(scripted_faults, settings=machine_settings(10, 25))
    # The run exercised the faults: most kinds fired, and broken rows did end in error.
    assert len(scripted_faults.fired_kinds) >= len(FAULTS) - 2, scripted_faults.fired_kinds
    assert scripted_faults.errors_seen >= 20


@pytest.mark.model
def test_faults_end_only_their_own_row_real_model(embedded):
    class Real(FaultMachine):
        loaded = embedded
        max_tokens = 8
        max_words = 40
        exact = False
        fired_kinds: ClassVar[dict[str, int]] = {}

    run_state_machine_as_test(Real, settings=machine_settings(4, 12))
    assert Real.errors_seen >= 3, Real.fired_kinds


def test_the_mlx_lm_processor_raises_on_a_mask_the_engine_failed(tokenizer):
    """The same silent stop under unmodified mlx_lm.generate: an error, not a mask of nothing
    (every logit -inf, a garbage draw)."""
    import mlx.core as mx

    from afm_struct.decoding.mlx_lm_processor import make_mlx_lm_processor
    from afm_struct.grammar.compiler import compile_constraint
    from afm_struct.grammar.engines.protocol import MatcherError
    from afm_struct.grammar.spec import JsonObjectRequest

    from .faults import FaultyMatcher

    compiled = compile_constraint(tokenizer, JsonObjectRequest())

    class Broken:
        def new_matcher(self):  # type: ignore[no-untyped-def]
            return FaultyMatcher(compiled.new_matcher(), "mask_silent", 2)

    processor = make_mlx_lm_processor(Broken(), tokenizer)
    prompt = tokenizer.encode("{")
    logits = mx.zeros((1, tokenizer.vocab_size))
    processor(mx.array(prompt), logits)  # the first mask is fine
    with pytest.raises(MatcherError) as info:
        processor(mx.array([*prompt, tokenizer.encode("{")[0]]), logits)
    assert MARK in info.value.detail  # the engine's words are there, for the caller's log
