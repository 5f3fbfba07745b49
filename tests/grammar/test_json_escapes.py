"""Patterns whose class excludes ``\\`` or ``"`` (``[^\\\\]``, ``[^"]``): llguidance 1.9.1
accepted those characters written as JSON escapes when the class held U+0000 (a wrong
acceptance on the dev set: libman's ``destination`` took ``"js\\\\subfolder/"``).  Every string
below goes through the compiled grammar in both property orders and must be accepted exactly
when Python's ``re.search`` matches it (NUL aside: the workaround keeps it out, on purpose)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from afm_struct.grammar.compiler import ConstraintCompiler
from afm_struct.grammar.json_escapes import guard_pattern
from afm_struct.grammar.spec import CompileOptions, JsonSchemaRequest, Mode

from .schema_strategies import EXAMPLES

PATTERNS = [r"^[^\\]+$", r'^[^"]*$', r'^[^\\"]+$', r"^a[^\\x]b$", r"^[^]\\]+$", r"^(?:[^\\]|\\\\)+$"]
TEXTS = st.text(alphabet='ab\\"x]\n\t/é', max_size=6)


def _accepts(constraint: Any, tokenizer: Any, value: str) -> bool:
    m = constraint.new_matcher()
    tokens = tokenizer.encode(json.dumps(value, ensure_ascii=False))
    return all(m.advance(t) for t in tokens) and m.is_accepting()


@pytest.fixture(scope="module")
def compilers(tokenizer) -> dict[str, ConstraintCompiler]:  # type: ignore[no-untyped-def]
    return {order: ConstraintCompiler(tokenizer, CompileOptions(property_order=order))
            for order in ("schema", "any")}


def test_guard_adds_nul_to_negated_classes_only() -> None:
    assert guard_pattern(r"^[^\\]+$") == r"^[^\x00\\]+$"
    assert guard_pattern(r"^[^]a]$") == r"^[^\x00\]a]$"
    assert guard_pattern(r"^\[^a][[^b]]$") == r"^\[^a][[^b]]$"  # an escaped "[" and a plain class
    assert guard_pattern("abc") == "abc"


@pytest.mark.parametrize("pattern", PATTERNS)
@settings(max_examples=EXAMPLES, deadline=None)
@given(texts=st.lists(TEXTS, min_size=4, max_size=8))
def test_excluded_escapes_are_rejected(compilers, tokenizer, pattern: str, texts: list[str]) -> None:  # type: ignore[no-untyped-def]
    texts = [*texts, "a\\b", 'a"b', "ab", "a\\\\b"]
    for order, compiler in compilers.items():
        constraint = compiler.compile(JsonSchemaRequest({"type": "string", "pattern": pattern}))
        assert constraint.mode is Mode.ENFORCED, (order, constraint.reason)
        for text in texts:
            expected = bool(re.search(pattern, text))
            assert _accepts(constraint, tokenizer, text) == expected, (order, pattern, text)
