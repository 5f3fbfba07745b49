"""Random traffic through the generator over the real embedded model (hypothesis state machine).

The real batch cache is what the scripted model cannot stand in for: RaggedKVCache buffers with
reserved rows, the spare batch reused by the next one, prefix-cache restores, packed ragged
steps.  After every rule each batched row must hold exactly its prompt plus the tokens fed so
far; at the end greedy requests equal their lone run (a flip at a near tie excepted: see
randomized.py).  The rules and the other invariants are in randomized.py.  On the code before
bad82d3 (a burst prefilled together copied its spare rows into the running batch) this fails
the row check.  ``AFM_STRUCT_RANDOM_EXAMPLES=N`` runs N examples.
"""

from __future__ import annotations

import pytest
from hypothesis.stateful import run_state_machine_as_test

from .randomized import TrafficMachine, machine_settings

pytestmark = pytest.mark.model


def test_random_traffic_real_model(embedded):
    class Real(TrafficMachine):
        loaded = embedded
        max_tokens = 8
        max_words = 40
        exact = False

    run_state_machine_as_test(Real, settings=machine_settings(2, 10))
