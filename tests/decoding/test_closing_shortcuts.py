"""The closer's shortcuts: a plan repaired after a token off it, rough searches far from the cut.

``BudgetCloser._repair`` (decoding/length_close.py) replaces the closing search after a token
the model wrote off the known completion when the run the grammar then forces and a tail of the
old plan complete the grammar (``"`` where the plan had ``",``: the comma is forced, the rest of
the plan follows).  Its result is the plan fed at the cut, so every plan it keeps must make the
output valid if fed right then; checked here against the schema itself (jsonschema), not the
matcher that produced it.  ``AFM_STRUCT_RANDOM_EXAMPLES=N`` runs the property with N examples.
"""

from __future__ import annotations

import json
import os
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from afm_struct.decoding.generator import Finished, GenerationRequest, Generator
from afm_struct.decoding.length_close import BudgetCloser, check_budget
from afm_struct.decoding.sampling import SamplingParams
from afm_struct.errors import AfmError
from afm_struct.grammar.closer.completion import closing_vocab_for
from afm_struct.grammar.closer.search import allowed_ids
from afm_struct.grammar.compiler import compile_constraint
from afm_struct.grammar.engines.protocol import allocate_bitmask
from afm_struct.grammar.spec import JsonSchemaRequest
from afm_struct.testing import random_loaded_model

from ..dev_set import dev_doc

STR = {"type": "string"}
TAGGED = {"type": "object", "properties": {"title": STR, "tags": {"type": "array", "items": STR}},
          "required": ["title", "tags"], "additionalProperties": False}
EXAMPLES = int(os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES", "0")) or 8


def test_a_token_off_the_plan_keeps_the_plan_tail_without_a_search(tokenizer) -> None:
    constraint = compile_constraint(tokenizer, JsonSchemaRequest(TAGGED, strict=True))
    ids = tokenizer.encode('{"title": "ab')
    matcher = constraint.new_matcher()
    assert all(matcher.advance(t) for t in ids)
    closer = BudgetCloser(closing_vocab_for(tokenizer), tokenizer.vocab_size, tokenizer.decode)
    budget = len(ids) + 100  # inside the zone, with room to spare
    assert closer.before_sample(matcher, ids, budget) is None
    plan = list(closer.plan or [])
    assert closer.searches == 1 and plan
    row = allocate_bitmask(1, tokenizer.vocab_size)[0]
    matcher.fill_mask(row)
    quotes = [t for t in allowed_ids(row, tokenizer.vocab_size, 1 << 20)
              if '"' in tokenizer.decode([t]) and t != plan[0]]
    kept = []
    for token in quotes:
        closer.plan, closer.closed, searches = list(plan), False, closer.searches
        if BudgetCloser._still_completes(matcher, token, plan):
            continue  # not the repair's case
        if closer.review(matcher, ids, token, budget) is None and closer.searches == searches:
            text = tokenizer.decode([*ids, token, *(closer.plan or [])])
            jsonschema.validate(json.loads(text), TAGGED)  # fed now, the plan is an instance
            kept.append(tokenizer.decode([token]))
    # The closing quote alone (the plan wrote `",`): the comma is forced, the plan's tail follows.
    assert '"' in kept, kept


def _observing(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[int], int, list[int]]]:
    """Record (tokens so far, token, plan kept) at each review the repair answered."""
    seen: list[tuple[list[int], int, list[int]]] = []
    review = BudgetCloser.review

    def observed(self: BudgetCloser, matcher: Any, tokens: Any, token: int, max_tokens: int) -> Any:
        searches, before = self.searches, self.plan
        instead = review(self, matcher, tokens, token, max_tokens)
        if (instead is None and before and token != before[0] and self.searches == searches
                and self.plan is not None and self.plan is not before and self.plan != before[1:]):
            seen.append((list(tokens), token, list(self.plan)))
        return instead

    monkeypatch.setattr(BudgetCloser, "review", observed)
    return seen


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
          derandomize=not os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES"))
@given(index=st.integers(0, 1 << 20), max_tokens=st.integers(1, 120), seed=st.integers(0, 10_000))
def test_every_repaired_plan_fed_then_validates(tokenizer, index, max_tokens, seed) -> None:
    """Dev-set schemas x random budgets x a random-weight model: each plan the repair keeps,
    fed at that step, makes an output the schema validates (formats asserted), and the cut
    output validates whenever the budget holds the shortest output."""
    try:
        constraint = compile_constraint(tokenizer, JsonSchemaRequest(dev_doc(index)["schema"], strict=True))
        if constraint.new_matcher() is None:
            return
        check_budget(constraint, tokenizer, max_tokens, param="max_tokens")
    except AfmError:
        return  # refused before generating (schema, or a budget below the shortest output)
    with pytest.MonkeyPatch.context() as patch:
        seen = _observing(patch)
        gen = Generator.from_loaded(random_loaded_model(tokenizer, seed))
        prompt = tokenizer.encode_chat([{"role": "user", "content": "JSON"}])
        params = SamplingParams(temperature=1.0, seed=seed, max_tokens=max_tokens)
        fin = list(gen.generate(GenerationRequest(prompt, params, constraint=constraint)))[-1]
    assert isinstance(fin, Finished) and fin.reason in ("stop", "length"), fin
    assert fin.usage.completion_tokens <= max_tokens
    where = (index, max_tokens, seed)
    assert constraint.validate(fin.text).ok or constraint.flag_downgraded, (*where, fin.text[-120:])
    for tokens, token, plan in seen:
        assert len(tokens) + 1 + len(plan) <= max_tokens, where  # it fits the budget
        text = tokenizer.decode([*tokens, token, *plan])
        assert constraint.validate(text).ok or constraint.flag_downgraded, (*where, text[-120:])


def test_far_from_the_cut_a_search_takes_its_first_completion_and_near_it_refines(tokenizer) -> None:
    """A review search with ample room runs without refinements (its length only has to fit);
    once the room gets down to twice the plan, the plan is searched again with them, and the
    cut output validates."""
    from afm_struct.decoding import length_close

    item = {"type": "object", "properties": {"k": STR, "n": {"type": "integer"}}, "required": ["k", "n"],
            "additionalProperties": False}
    schema = {"type": "object", "properties": {"rows": {"type": "array", "items": item}, "t": STR},
              "required": ["rows", "t"], "additionalProperties": False}
    constraint = compile_constraint(tokenizer, JsonSchemaRequest(schema, strict=True))
    calls: list[tuple[bool, int | None]] = []  # (after a token off the plan, refinements asked)
    search = length_close.shortest_completion

    def recorded(*args: Any, **kwargs: Any) -> Any:
        calls.append((bool(kwargs.get("prefix")), kwargs.get("refinements")))
        return search(*args, **kwargs)

    budget = 120
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(length_close, "shortest_completion", recorded)
        gen = Generator.from_loaded(random_loaded_model(tokenizer, 3))
        prompt = tokenizer.encode_chat([{"role": "user", "content": "JSON"}])
        params = SamplingParams(temperature=1.0, seed=3, max_tokens=budget)
        fin = list(gen.generate(GenerationRequest(prompt, params, constraint=constraint)))[-1]
    assert isinstance(fin, Finished) and fin.reason == "length", fin
    jsonschema.validate(json.loads(fin.text), schema)
    rough = [i for i, (after_token, refinements) in enumerate(calls) if after_token and refinements == 0]
    refined = [i for i, (_, refinements) in enumerate(calls) if refinements != 0]
    assert rough, calls  # far from the cut: first completions only
    # Near it: the rough plan is searched again with refinements (from the current state),
    # and no search after that goes without them.
    near = next(i for i in refined if i > rough[0])
    assert not calls[near][0] and all(i < near for i in rough), calls
