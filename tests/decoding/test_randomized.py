"""Random traffic through the generator over the scripted model (hypothesis state machine).

See randomized.py for the rules and invariants.  The scripted model is deterministic, so every
request that was not cancelled must end exactly as it does alone.  CI runs a few dozen
derandomized examples; ``AFM_STRUCT_RANDOM_EXAMPLES=400`` runs more by hand.
"""

from __future__ import annotations

import pytest

from afm_struct.testing import Script, scripted_loaded_model

from .randomized import TrafficMachine, machine_settings


def _script_text(prompt_ids: list[int]) -> str:
    # Deterministic per prompt and close to an instance of every constraint the runs use, so
    # constrained outputs follow the script for a while and then the masks take over.
    n = sum(prompt_ids) % 97
    return (f'{{"name": "get_weather", "arguments": {{"city": "N{n}", "unit": "c"}}}} '
            f'{{"name": "N{n}", "age": {n}}} and then ["x", "y"] more words about {n}\nzeta')


@pytest.fixture
def scripted_machine(tokenizer):
    class Scripted(TrafficMachine):
        loaded = scripted_loaded_model(tokenizer, Script(_script_text))

    return Scripted


def test_random_traffic_scripted(scripted_machine):
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(scripted_machine, settings=machine_settings(20, 25))
