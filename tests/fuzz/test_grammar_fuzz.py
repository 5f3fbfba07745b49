"""The grammar fuzzer, CI-sized (tests/fuzz/grammar_fuzz.py): hostile constraints through raw
llguidance and through our compile path, each in a child process.

Whatever the raw engine does with a case (compile it, refuse it, crash on it), our
``compile_constraint`` must answer: a compile, a downgrade or a 4xx, never a crash, a hang or an
unexpected exception.  ``FUZZ_EXAMPLES`` derandomized cases here; ``make fuzz-grammar`` (part of
``make fuzz``) runs ``python -m tests.fuzz.grammar_fuzz 2000``, random, with a findings table.

The findings so far, each a regression below: integer ranges and integer ``const``/``enum``
values at -2^63 crash llguidance 1.9.1 (SIGSEGV); see docs/constraints.md ("Numbers the engine
cannot take").
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings

from .grammar_fuzz import GrammarChild
from .grammar_strategies import cases

FUZZ_EXAMPLES = 30
EXAMPLES = int(os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES", "0")) or FUZZ_EXAMPLES
I64_MIN = -(2**63)

# The fuzzer's findings: each crashed raw llguidance 1.9.1 with SIGSEGV.
CRASHES = [
    ("json", {"type": "integer", "minimum": I64_MIN, "maximum": I64_MIN}),
    ("json", {"type": "integer", "minimum": I64_MIN + 512, "maximum": I64_MIN + 512}),
    ("json", {"type": "integer", "minimum": -1e20, "maximum": -1e19}),
    ("json", {"type": "integer", "minimum": -1e300, "maximum": -1e299}),
    ("json", {"type": "integer", "minimum": -1e19, "exclusiveMaximum": I64_MIN + 1}),
    ("json", {"type": "integer", "exclusiveMinimum": -1e20, "maximum": I64_MIN}),
    ("json", {"const": I64_MIN + 7}),
    ("json", {"type": "array", "items": {"enum": ["a", I64_MIN]}}),
    ("json", {"type": "object", "properties": {"a": {"const": [I64_MIN]}}}),
    ("lark", {"type": "integer", "minimum": -1e20, "maximum": -1e19}),
    # found by `make fuzz-grammar` (benchmarks/fuzz/grammar.md)
    ("json", {"type": "array", "items": {"type": "array", "items": {"enum": [I64_MIN + 512, 0]}}}),
    ("json", {"type": "object", "properties": {"k": {"type": "integer", "minimum": -4.876533014357769e242,
                                                     "maximum": -4.876533014357769e242}}, "required": ["k"]}),
    ("lark", {"enum": [I64_MIN + 1, None]}),
]


@pytest.fixture(scope="module")
def children() -> Iterator[tuple[GrammarChild, GrammarChild]]:
    raw, ours = GrammarChild("raw"), GrammarChild("ours")
    yield raw, ours
    raw.stop()
    ours.stop()


@pytest.mark.parametrize("kind, schema", CRASHES, ids=[f"{k}:{json.dumps(s)[:50]}" for k, s in CRASHES])
def test_what_crashes_the_raw_engine_is_answered_by_ours(children, kind, schema) -> None:
    raw, ours = children
    text = json.dumps(schema) if kind == "json" else "start: %json " + json.dumps(schema)
    assert raw.run(kind, text)["status"] == "crash", \
        "llguidance no longer crashes on this: docs/constraints.md and engine_numbers.py say it does"
    verdict = ours.run(kind, text)
    if kind == "lark":
        assert verdict["status"] == "refused" and verdict["detail"].startswith("400"), verdict
    else:
        assert verdict["status"] == "ok", verdict
        assert verdict["detail"] == "downgraded relaxed number_beyond_engine", verdict


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
          derandomize=not os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES"), database=None)
@given(case=cases())
def test_no_constraint_crashes_or_hangs_our_compile(children, case) -> None:
    _raw, ours = children
    kind, text = case
    verdict = ours.run(kind, text)
    assert verdict["status"] in ("ok", "refused"), (verdict, kind, text[:300])
    if verdict["status"] == "refused":
        assert verdict["detail"][:1] == "4", (verdict, kind, text[:300])  # a client error, never a 500
