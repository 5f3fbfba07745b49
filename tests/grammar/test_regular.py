"""Regular languages (grammar/patterns/regular.py, automata.py, regex_writer.py, pattern_lang.py).

* A pattern's language is exactly the strings Python's ``re.search`` matches (jsonschema's
  reading), on hypothesis-generated strings, for the pattern shapes the dev set holds.
* ``~``, ``&``, ``|`` are complement, intersection, union.
* The regex :meth:`Lang.to_pattern` writes means the same language to Python's ``re`` and to
  llguidance (compiled through the real compiler and walked token by token).
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from afm_struct.grammar.engines.protocol import allocate_bitmask
from afm_struct.grammar.patterns import regular
from afm_struct.grammar.patterns.pattern_lang import pattern_language
from afm_struct.grammar.spec import JsonSchemaRequest, Mode
from afm_struct_bench.masks import walk_instance

from .schema_strategies import EXAMPLES

PATTERNS = [
    "^a", "b$", "^[ab]+$", "^(?!a)[a-z]*$", "(a|$)", "\\d", "^\\w+$", "a.b", "^(?!@@)[\\w@]+$",
    "^(?=.*1)", "^[^@]*$", "^(ab)*$", "x|^b", "^\\S+@\\S+$", "^[A-Z]{2,3}$", "^(?:a|b)?c{0,2}$",
    "^$", "a*?b", "[^\\n]", "^(?!.*--)[a-z-]+$", "(^a|b$)", "^\\s*$", "\\Aa", "a\\Z", "^.{1,3}$",
]
# Strings over the characters the patterns care about, plus non-ASCII word and space characters.
STRINGS = st.text("ab1@-_ .\nxcZé٣\u2003", max_size=6)


def _fullmatch_python(pattern: str, text: str) -> bool:
    return bool(re.search(pattern, text))


@pytest.mark.parametrize("pattern", PATTERNS)
@settings(max_examples=EXAMPLES, deadline=None)
@given(text=STRINGS)
def test_pattern_language_is_pythons_search(pattern: str, text: str) -> None:
    lang = pattern_language(pattern)
    assert lang is not None, pattern
    assert lang.dfa().fullmatch(text) == _fullmatch_python(pattern, text)


@settings(max_examples=EXAMPLES, deadline=None)
@given(a=st.sampled_from(PATTERNS), b=st.sampled_from(PATTERNS), text=STRINGS)
def test_boolean_operations(a: str, b: str, text: str) -> None:
    la, lb = pattern_language(a), pattern_language(b)
    assert la is not None and lb is not None
    in_a, in_b = _fullmatch_python(a, text), _fullmatch_python(b, text)
    assert (~la).dfa().fullmatch(text) == (not in_a)
    assert (la & lb).dfa().fullmatch(text) == (in_a and in_b)
    assert (la | ~lb).dfa().fullmatch(text) == (in_a or not in_b)
    assert (la & ~la).is_empty() is True


def test_unmodelled_patterns_answer_none() -> None:
    for pattern in ("(a)\\1", "(?<=a)b", "\\bword", "(?i)abc", "(?m)^a$", "(?>a+)b"):
        assert pattern_language(pattern) is None, pattern


def test_budget_bounds_the_work() -> None:
    lang = pattern_language("^[a-z]{0,3}x$")
    assert lang is not None
    with regular.budget(30):
        assert (~lang).to_pattern() is None  # too complex for the budget: no answer, no guess
    assert (~lang).is_empty() is False


@settings(max_examples=EXAMPLES, deadline=None)
@given(a=st.sampled_from(PATTERNS), b=st.sampled_from(PATTERNS),
       texts=st.lists(STRINGS, min_size=4, max_size=8))
def test_written_regex_means_the_same_to_python(a: str, b: str, texts: list[str]) -> None:
    la, lb = pattern_language(a), pattern_language(b)
    assert la is not None and lb is not None
    lang = la & ~lb
    written = lang.to_pattern()
    if written is None:  # the empty language, or past the size bounds: no regex, never a wrong one
        return
    assert written.startswith("^(?:") and written.endswith(")$")
    body = written[1:-1]
    for text in texts:
        assert bool(re.fullmatch(body, text)) == lang.dfa().fullmatch(text), (written, text)


# The engine check compiles each regex: a fixed set of languages built from the patterns above
# (complements and intersections, the shapes the rewrites write), against sampled strings.
_ENGINE_CASES = [("~", "^a"), ("~", "^(?!a)[a-z]*$"), ("&", "^[a-z@]+$", "^(?!@@)[a-z@]+$"), ("~", "^(a|b$)"),
                 ("&~", "^[ab]+$", "b$"), ("~", "\\d"), ("&", "a.b", "^.{1,3}$"), ("~", "^\\s*$"),
                 # Unicode classes (Python's \\d, \\w) printed as characters, not six-character
                 # escapes: these complements passed the pattern bound before
                 ("~", "^[A-Fa-f\\d]{24}$"), ("~", "^[\\w]*$"), ("~", "^\\w{2}\\s\\d$")]


def _lang(case: tuple[str, ...]) -> regular.Lang:
    langs = [pattern_language(p) for p in case[1:]]
    assert all(x is not None for x in langs)
    if case[0] == "~":
        return ~langs[0]  # type: ignore[operator]
    if case[0] == "&":
        return langs[0] & langs[1]  # type: ignore[operator]
    return langs[0] & ~langs[1]  # type: ignore[operator]


@pytest.mark.parametrize("case", _ENGINE_CASES, ids=["".join(c) for c in _ENGINE_CASES])
def test_written_regex_means_the_same_to_the_engine(  # type: ignore[no-untyped-def]
        compiler, tokenizer, case: tuple[str, ...]) -> None:
    lang = _lang(case)
    written = lang.to_pattern()
    assert written is not None
    constraint = compiler.compile(JsonSchemaRequest({"type": "string", "pattern": written}))
    assert constraint.mode is Mode.ENFORCED, constraint.reason
    bitmask = allocate_bitmask(1, tokenizer.vocab_size)
    times: list[float] = []
    rng = np.random.default_rng(7)
    alphabet = list("ab1@-_ .\nxcZé٣\u2003")
    samples = {"", "a", "b", "ab", "@@a", "a\n", "1", "aab", "a-b", "٣", "\u2003"}
    samples |= {"".join(rng.choice(alphabet, size=n)) for n in (1, 2, 3, 4, 5) for _ in range(12)}
    for text in sorted(samples):
        accepted = walk_instance(constraint, tokenizer, json.dumps(text, ensure_ascii=False), bitmask, times)
        assert accepted == lang.dfa().fullmatch(text), (written, text)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(st.text(max_size=3), max_size=4))
def test_one_of_and_its_complement(texts: list[str]) -> None:
    lang = regular.one_of(texts)
    others = ~lang
    for text in [*texts, "", "zz", "\n"]:
        assert lang.dfa().fullmatch(text) == (text in texts)
        assert others.dfa().fullmatch(text) == (text not in texts)
