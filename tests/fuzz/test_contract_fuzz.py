"""Random-weight models as a fuzzer: whatever a model emits, no response breaks the contract.

Tiny random-weight models of every family tests/models builds, dense and mixture-of-experts
(their tokenizers, chat templates, thinking tags and every tool syntax: Hermes, Llama JSON,
Mistral's two, Qwen3-Coder XML, GLM key/value tags, Harmony, pythonic; tests/fuzz/driver.py) are
served over real HTTP; the families share the example count.  Hypothesis draws
requests (tests/fuzz/requests.py: dev-set and generated schemas, tools under every tool_choice,
streamed or not, logprobs, budgets 1-300, temperatures 0-2, stop strings, cancels) and every
response is checked against the contract (tests/fuzz/contract.py).  A random model emits what
trained ones rarely do: control tokens, half a tool-call opener, a thinking tag inside its
reasoning, another family's markup, nothing that ever ends.

CI-sized: ``FUZZ_EXAMPLES`` derandomized requests (80; 150 until the suite passed 15 minutes).
``AFM_STRUCT_RANDOM_EXAMPLES=N`` runs N, not derandomized (``make fuzz`` runs 2000);
``python -m tests.fuzz.survey N`` tallies violations per family and invariant without stopping
at the first.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .driver import FAMILIES, FamilyServers, send
from .requests import FuzzCase, fuzz_cases

FUZZ_EXAMPLES = 50
EXAMPLES = int(os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES", "0")) or FUZZ_EXAMPLES


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=not os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES"),
)
@given(family=st.sampled_from(FAMILIES), case=fuzz_cases())
def test_no_response_breaks_the_contract(family_servers: FamilyServers, family: str, case: FuzzCase) -> None:
    outcome = send(family_servers.get(family), case)
    assert not [v for v in outcome.violations if v.known is None], outcome.report()
