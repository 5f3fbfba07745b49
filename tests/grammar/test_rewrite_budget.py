"""The schema rewrites have a work budget: nesting that makes them exponential (a negation
rewrites its subschema again) ends in the schema compiled as written and downgraded with a
reason, not minutes of Python holding the GIL (a 300-byte schema of 30 nested ``not`` took 85 s)."""

from __future__ import annotations

import pytest

from afm_struct.grammar.compiler import compile_constraint
from afm_struct.grammar.schema import rewrites
from afm_struct.grammar.schema.rewrites import rewrite_schema
from afm_struct.grammar.spec import JsonSchemaRequest


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
