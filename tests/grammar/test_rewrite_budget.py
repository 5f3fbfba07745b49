"""The schema rewrites have a work budget: nesting that makes them exponential (a negation
rewrites its subschema again) ends in the schema compiled as written and downgraded with a
reason, not minutes of Python holding the GIL (a 300-byte schema of 30 nested ``not`` took 85 s)."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from afm_struct.grammar.compiler import compile_constraint
from afm_struct.grammar.schema import rewrites
from afm_struct.grammar.schema.rewrites import rewrite_schema
from afm_struct.grammar.spec import JsonSchemaRequest

from ..decoding.randomized import examples


def nested(keyword: str, depth: int) -> dict:
    """``depth`` levels of ``keyword``, each subschema written once (as a JSON body holds it:
    no part shared, so the text grows linearly with the depth)."""
    schema: dict = {"type": "integer", "minimum": 3}
    for _ in range(depth):
        if keyword == "not":
            schema = {"not": schema}
        elif keyword == "if":  # the condition is negated and rewritten positively
            schema = {"if": schema, "then": {"type": "integer"}, "else": {"type": "string"}}
        else:  # oneOf: every pair of branches is rewritten positively as well
            schema = {"oneOf": [schema, {"type": "string"}]}
    return schema


def test_exponential_nesting_stops_at_the_budget():
    schema = nested("not", 40)
    result = rewrite_schema(schema)
    assert result.schema is schema and result.applied == ()


@pytest.mark.parametrize("keyword", ["if", "oneOf"])
def test_other_nesting_stays_within_the_budget(keyword):
    # (if/then/else and oneOf nest without doubling: rewritten, or left alone, as before)
    schema = nested(keyword, 12)
    assert rewrite_schema(schema).applied == rewrites._rewrite(
        schema, 0, set(), set(), rewrites.WalkBudget(10**9)).applied


def test_shallow_nesting_is_still_rewritten():
    result = rewrite_schema(nested("not", 6))
    assert "not_positive" in result.applied


def test_the_budget_counts_visits_across_retries(monkeypatch):
    # A budget below what a small rewrite needs: the same outcome as an exhausted one.
    monkeypatch.setattr(rewrites, "WALK_BUDGET_FLOOR", 1)
    monkeypatch.setattr(rewrites, "WALK_BUDGET_PER_NODE", 0)
    schema = nested("not", 3)
    assert rewrite_schema(schema).applied == ()


def test_a_schema_over_the_budget_is_served_downgraded_with_a_reason(tokenizer):
    compiled = compile_constraint(tokenizer, JsonSchemaRequest(nested("not", 40)))
    assert compiled.mode == "downgraded" and compiled.reason and "not" in compiled.reason


# -- the class: no nesting of the keywords the rewrites recurse through escapes the budget ------

_LEAVES = st.sampled_from([{"type": "integer"}, {"type": "string", "minLength": 2}, {"const": 3},
                           {"type": "object", "required": ["a"]}, {"enum": [1, "x"]}, True])


_KINDS = ("not", "oneOf", "anyOf", "allOf", "if-then", "if-else", "properties", "items")


def _wrap(kind: str, inner: Any, other: Any) -> dict:
    """One level over ``inner`` (and a sibling ``other``) through a keyword a rewrite negates
    or re-walks."""
    return {"not": inner} if kind == "not" else {
        "oneOf": [inner, other], "anyOf": [inner, other], "allOf": [inner, other],
        "if-then": {"if": inner, "then": other}, "if-else": {"if": inner, "else": other},
        "properties": {"type": "object", "properties": {"a": inner}, "additionalProperties": other},
        "items": {"type": "array", "items": inner, "contains": other}}[kind]


@st.composite
def _nested(draw: Any) -> Any:
    """A spine of up to 4 runs of up to 24 levels of one keyword each (long runs of one keyword
    are what make a rewrite exponential), each level over the level below and a leaf."""
    schema = draw(_LEAVES)
    runs = draw(st.lists(st.tuples(st.sampled_from(_KINDS), st.integers(1, 24)), min_size=1, max_size=4))
    for kind, length in runs:
        for _ in range(length):
            schema = _wrap(kind, schema, draw(_LEAVES))
    return schema


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_nested())
def test_no_nesting_makes_the_rewrites_outgrow_their_budget(schema):
    """Every Python call the rewrites make is counted (not only the visits the budget charges):
    with a small budget, a shape whose work grows past it by a path the budget does not charge
    (the class of the nested-``not`` blow-up) shows as calls far beyond a fixed multiple.  (With
    the budget switched off this test does not finish: it runs into the suite's timeout.)"""
    calls = [0]

    def count(frame, event, arg):
        if event == "call":
            calls[0] += 1

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rewrites, "WALK_BUDGET_FLOOR", 300)
        patch.setattr(rewrites, "WALK_BUDGET_PER_NODE", 2)
        sys.setprofile(count)
        try:
            rewrite_schema(schema)
        finally:
            sys.setprofile(None)
    nodes = rewrites._count_nodes(schema)
    # ~1,000 calls per charged visit is generous (a visit's own helpers, the regex work the
    # rewrites bound with their own budget); an uncharged exponential path exceeds it at once.
    assert calls[0] <= 1_000 * (300 + 2 * nodes) + 50_000, (calls[0], nodes)
