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
from afm_struct.grammar.patterns.json_escapes import guard_pattern
from afm_struct.grammar.spec import CompileOptions, JsonSchemaRequest, Mode

from .schema_strategies import EXAMPLES

PATTERNS = [r"^[^\\]+$", r'^[^"]*$', r'^[^\\"]+$', r"^a[^\\x]b$", r"^[^]\\]+$", r"^(?:[^\\]|\\\\)+$"]
TEXTS = st.text(alphabet='ab\\"x]\n\t/é', max_size=6)


def _ecma(pattern: str) -> str:
    """``pattern`` for Python's ``re`` as JSON Schema (ECMA-262) reads it: a final ``$`` matches
    only at the very end, not also before a final newline as Python's does (the engine follows
    ECMA; ``^ab$`` and "ab\\n" once failed this file's random test)."""
    return pattern[:-1] + r"\Z" if pattern.endswith("$") and not pattern.endswith(r"\$") else pattern


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


def test_guard_writes_braces_as_python_reads_them() -> None:
    # Repeats to Python stay (``{,n}`` spelled ``{0,n}``); any other brace is a plain character.
    for pattern, guarded in ((r"^a{3}$", r"^a{3}$"), (r"^a{3,}$", r"^a{3,}$"), (r"^a{2,4}$", r"^a{2,4}$"),
                             (r"^a{,2}$", r"^a{0,2}$"), (r"^a{,}$", r"^a{0,}$"),
                             (r"^a{ 3}$", r"^a\{ 3}$"), (r"^a{3 }$", r"^a\{3 }$"),
                             (r"^a{3, 5}$", r"^a\{3, 5}$"),
                             (r"^a{}$", r"^a\{}$"), (r"^a{x}$", r"^a\{x}$"), (r"^{$", r"^\{$"),
                             (r"^\{3}$", r"^\{3}$"), (r"^[{ 3}]$", r"^[{ 3}]$"),
                             (r"^\p{L}+$", r"^\p{L}+$"), (r"^\x{41}$", r"^\x{41}$")):
        assert guard_pattern(pattern) == guarded, pattern


# Pattern pieces around braces: repeats in every spelling Python takes or not, escapes, classes.
BRACE_PIECES = ["a", "b", "{", "}", "{2}", "{1,}", "{,2}", "{1,2}", "{ 2}", "{2 }", "{1, 2}", "{}", "{,}",
                "{x}", "[{]", "[a{]", "\\{", "\\}", "(a|b)", ".", " ", ","]


@pytest.mark.parametrize("pattern", PATTERNS)
@settings(max_examples=EXAMPLES, deadline=None)
@given(texts=st.lists(TEXTS, min_size=4, max_size=8))
def test_excluded_escapes_are_rejected(compilers, tokenizer, pattern: str, texts: list[str]) -> None:  # type: ignore[no-untyped-def]
    texts = [*texts, "a\\b", 'a"b', "ab", "a\\\\b", "a/b\n"]
    for order, compiler in compilers.items():
        constraint = compiler.compile(JsonSchemaRequest({"type": "string", "pattern": pattern}))
        assert constraint.mode is Mode.ENFORCED, (order, constraint.reason)
        for text in texts:
            expected = bool(re.search(_ecma(pattern), text))
            assert _accepts(constraint, tokenizer, text) == expected, (order, pattern, text)


@settings(max_examples=EXAMPLES * 3, deadline=None, derandomize=True, database=None)
@given(pieces=st.lists(st.sampled_from(BRACE_PIECES), min_size=1, max_size=6),
       texts=st.lists(st.text(alphabet="ab{} ,12x", max_size=7), min_size=4, max_size=8))
def test_braces_mean_what_validation_reads(compilers, tokenizer, pieces: list[str], texts: list[str]) -> None:  # type: ignore[no-untyped-def]
    """llguidance's regex syntax read ``a{ 3}`` as a repeat, Python's (validation's) as text:
    every brace spelling, in patterns Python compiles, is enforced as ``re.search`` judges."""
    pattern = "^" + "".join(pieces) + "$"
    try:
        compiled = re.compile(_ecma(pattern))
    except re.error:
        return  # refused by the meta-schema check before any engine sees it
    texts = [*texts, "".join(p for p in pieces if p not in ("(a|b)", ".", "[{]", "[a{]")).replace("\\", "")]
    for order, compiler in compilers.items():
        constraint = compiler.compile(JsonSchemaRequest({"type": "string", "pattern": pattern}))
        assert constraint.mode is Mode.ENFORCED, (order, pattern, constraint.reason)
        for text in texts:
            expected = bool(compiled.search(text))
            assert _accepts(constraint, tokenizer, text) == expected, (order, pattern, text)


def test_a_spaced_repeat_cannot_slip_past_the_forced_run_budget(compilers, tokenizer) -> None:  # type: ignore[no-untyped-def]
    """``^a{ 1000000}$`` is the text "a{ 1000000}" to validation and to the budget; llguidance
    read a million a's, and ran its lexer out of fuel in mid-output."""
    for pattern, literal in (("^a{ 1000000}$", "a{ 1000000}"), ("^a{1000000 }$", "a{1000000 }"),
                             ("^(ab){1000000, 2000000}$", "ab{1000000, 2000000}")):
        assert re.search(pattern, literal) and not re.search(pattern, "aaa")
        for order, compiler in compilers.items():
            constraint = compiler.compile(JsonSchemaRequest({"type": "string", "pattern": pattern}))
            assert constraint.mode is Mode.ENFORCED, (order, constraint.reason)
            assert _accepts(constraint, tokenizer, literal), (order, pattern)
            assert not _accepts(constraint, tokenizer, "aaa"), (order, pattern)


@pytest.mark.parametrize("pattern", ["^a,{}$", "^a:{}$", "^[{}]$", "^{}{ 2}$", "^a{}$", "^x,{ 2}$"])
def test_a_brace_is_found_in_the_schema_text(compilers, tokenizer, pattern: str) -> None:  # type: ignore[no-untyped-def]
    """The compile decides from the schema's JSON text whether any pattern needs the guard;
    braces right after JSON's own ":" or "," (``a,{}``) looked like an empty object there."""
    for order, compiler in compilers.items():
        constraint = compiler.compile(JsonSchemaRequest({"type": "string", "pattern": pattern}))
        assert constraint.mode is Mode.ENFORCED, (order, pattern, constraint.reason)
        text = pattern.strip("^$").replace("[{}]", "{")
        assert _accepts(constraint, tokenizer, text) == bool(re.search(_ecma(pattern), text)), (order, text)
