"""The per-token checks of the closing zone and the loop guard, made cheap (issue 40).

Inside the closing zone every token off the plan asks whether the plan still completes after it
(``BudgetCloser._still_completes``).  With llguidance that is one validation of the token, the
plan and EOS (``LLGuidanceMatcher.completes_with``) where a fork consumed the plan token by
token.  Checked here: the probe says exactly what the walk says, and the check no longer walks.
The loop guard's ``find_loop`` (every constrained row, every step) is checked against its
definition.  ``AFM_STRUCT_RANDOM_EXAMPLES=N`` runs the properties with N examples.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from afm_struct.decoding.length_close import BudgetCloser, known_shortest_output, shortest_output
from afm_struct.decoding.sampling import find_loop
from afm_struct.grammar.closer.completion import closing_vocab_for
from afm_struct.grammar.compiler import compile_constraint
from afm_struct.grammar.spec import JsonSchemaRequest

EXAMPLES = int(os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES", "0")) or 12
STR = {"type": "string"}
SCHEMA = {"type": "object", "properties": {
    "title": STR, "tags": {"type": "array", "items": STR}, "year": {"type": "integer"},
    "meta": {"type": "object", "properties": {"k": STR}, "required": ["k"], "additionalProperties": False}},
    "required": ["title", "tags", "year", "meta"], "additionalProperties": False}
DOCS = [
    {"title": "A tale of two cities", "tags": ["novel", "dickens"], "year": 1859, "meta": {"k": "v"}},
    {"title": "x", "tags": [], "year": -3, "meta": {"k": ""}},
    {"title": "quote \" and \\ slash", "tags": ["a", "b", "c", "d"], "year": 0, "meta": {"k": "ü€"}},
]


@pytest.fixture(scope="module")
def constraint(tokenizer):
    return compile_constraint(tokenizer, JsonSchemaRequest(SCHEMA, strict=True))


def walk_completes(matcher: Any, run: list[int]) -> bool:
    """The definition: a fork takes every token of ``run`` and is then complete."""
    fork = matcher.fork()
    return all(fork.advance(t) for t in run) and (fork.is_accepting() or fork.is_finished())


def at(constraint: Any, ids: list[int]) -> Any:
    matcher = constraint.new_matcher()
    assert all(matcher.advance(t) for t in ids)
    return matcher


def plan_at(tokenizer: Any, matcher: Any, ids: list[int]) -> list[int]:
    """The closer's plan after ``ids`` (its search reads the text so far)."""
    closer = BudgetCloser(closing_vocab_for(tokenizer), tokenizer.vocab_size, tokenizer.decode)
    assert closer.before_sample(matcher, ids, len(ids) + 100) is None
    return list(closer.plan or [])


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=st.sampled_from(DOCS), cut=st.floats(0, 1), span=st.integers(0, 40), tail=st.booleans())
def test_completes_with_says_what_a_walk_says(tokenizer, constraint, doc, cut, span, tail) -> None:
    ids = tokenizer.encode(json.dumps(doc, ensure_ascii=False))
    k = int(cut * len(ids))
    matcher = at(constraint, ids[:k])
    # A run of the document's own tokens (complete when it reaches the end), or the grammar's
    # shortest completion from here, or that completion after one of the document's tokens.
    if tail:
        run = ids[k:k + span]
    else:
        plan = plan_at(tokenizer, matcher, ids[:k])
        run = [*ids[k:k + 1], *plan] if span % 2 else plan
    assert matcher.completes_with(run) is walk_completes(matcher, run)
    assert matcher.completes_with(ids[k:]) is True  # the rest of a valid document
    more = [*run, ids[0]]
    assert matcher.completes_with(more) is walk_completes(matcher, more)


class Counting:
    """A matcher whose forks count the tokens they consume."""

    def __init__(self, inner: Any, counts: list[int]) -> None:
        self._inner, self._counts = inner, counts

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def fork(self) -> Counting:
        return Counting(self._inner.fork(), self._counts)

    def advance(self, token: int) -> bool:
        self._counts[0] += 1
        return self._inner.advance(token)


def test_the_zone_check_consumes_one_token_whatever_the_plan(tokenizer, constraint) -> None:
    ids = tokenizer.encode('{"title": "Around the world in')
    matcher = at(constraint, ids)
    plan = plan_at(tokenizer, matcher, ids)
    assert plan and len(plan) > 10  # the rest of the title, tags, year and meta
    counts = [0]
    word = tokenizer.encode(" eighty")  # string content: the same plan still completes
    assert len(word) == 1
    assert BudgetCloser._still_completes(Counting(matcher, counts), word[0], plan) is True
    assert counts[0] == 1  # the token itself, on a fork (its forced run is asked there)
    counts[0] = 0
    close = tokenizer.encode('",')[0]  # leaves the string: the plan's closing quote no longer fits
    assert BudgetCloser._still_completes(Counting(matcher, counts), close, plan) is walk_completes(
        matcher, [close, *plan]) is False
    assert counts[0] == 0  # refused by the probe alone


def test_the_first_plan_is_the_one_admission_found(tokenizer) -> None:
    schema = {**SCHEMA, "title": "test_closer_probe first plan"}  # a grammar of its own
    constraint = compile_constraint(tokenizer, JsonSchemaRequest(schema, strict=True))
    assert known_shortest_output(constraint) is None  # not searched for yet: the closer searches
    found = shortest_output(constraint, tokenizer)  # admission's check_budget searches once
    assert found and known_shortest_output(constraint) == found
    vocab = closing_vocab_for(tokenizer)
    with_start = BudgetCloser(vocab, tokenizer.vocab_size, tokenizer.decode, start=found)
    matcher = constraint.new_matcher()
    assert with_start.before_sample(matcher, [], 150) is None
    assert with_start.searches == 0 and with_start.plan == found and walk_completes(matcher, found)
    alone = BudgetCloser(vocab, tokenizer.vocab_size, tokenizer.decode)
    assert alone.before_sample(matcher, [], 150) is None
    assert alone.searches == 1 and alone.plan and len(alone.plan) >= len(found)
    # Past the start (a token taken), the known output says nothing: the closer searches.
    first = found[0]
    assert matcher.advance(first)
    later = BudgetCloser(vocab, tokenizer.vocab_size, tokenizer.decode, start=found)
    assert later.before_sample(matcher, [first], 150) is None and later.searches == 1


def loop_by_definition(tokens: list[int], max_period: int = 16, min_repeats: int = 3,
                       min_span: int = 10) -> int | None:
    n = len(tokens)
    for period in range(1, max_period + 1):
        span = period * max(min_repeats, -(-min_span // period))
        if span > n:
            break
        tail = tokens[n - span:]
        if all(tail[i] == tail[i - period] for i in range(period, span)):
            return tokens[n - period]
    return None


@settings(max_examples=EXAMPLES * 8, deadline=None)
@given(prefix=st.lists(st.integers(0, 3), max_size=20),
       cycle=st.lists(st.integers(0, 3), min_size=1, max_size=17),
       repeats=st.integers(0, 6), cut=st.integers(0, 16))
def test_find_loop_is_its_definition(prefix, cycle, repeats, cut) -> None:
    tokens = prefix + cycle * repeats
    tokens = tokens[:max(0, len(tokens) - cut)] if cut % 3 == 0 else tokens
    assert find_loop(tokens) == loop_by_definition(tokens)
