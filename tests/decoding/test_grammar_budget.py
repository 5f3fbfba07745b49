"""The per-request grammar budget (decoding/grammar_budget.py): charged as the work is done,
over it the row alone ends, and a dear row is filled (and timed) on its own."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

from afm_struct.decoding.grammar_budget import DEAR_ROW_S, GrammarBudget
from afm_struct.decoding.next_mask import MaskFiller
from afm_struct.errors import GrammarLimitError
from afm_struct.grammar.engines.llguidance_engine import LLGuidanceEngine

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def test_charges_add_up_and_end_past_the_limit() -> None:
    budget = GrammarBudget(0.05)
    budget.charge(0.03, 3)
    with pytest.raises(GrammarLimitError) as info:
        budget.charge(0.03, 4)
    assert info.value.code == "grammar_too_complex" and info.value.status == 400
    assert "grammar budget of 0.05 s" in info.value.message and "after 4 tokens" in info.value.message
    unlimited = GrammarBudget(None)
    unlimited.charge(1e9, 1)
    assert unlimited.spent_s == 1e9


class Dear:
    """A real matcher whose mask takes ``cost_s`` longer, offering no batch fill."""

    def __init__(self, inner: Any, cost_s: float) -> None:
        self.inner = inner
        self.cost_s = cost_s

    def fill_mask(self, row: Any) -> None:
        time.sleep(self.cost_s)
        self.inner.fill_mask(row)

    def __getattr__(self, name: str) -> Any:
        if name == "batch_fill":
            raise AttributeError(name)
        return getattr(self.inner, name)


def _row(matcher: Any, limit_s: float | None) -> Any:
    return SimpleNamespace(matcher=matcher, closer=None, tokens=[], max_tokens=100, mask=None,
                           mask_all=True, mask_free=True, timings=SimpleNamespace(mask_s=0.0),
                           grammar=GrammarBudget(limit_s), done=False,
                           request=SimpleNamespace(stops_cut_grammar=False))


def test_the_row_over_its_budget_ends_alone_and_is_charged_its_own_time(tokenizer: Any) -> None:
    grammar = LLGuidanceEngine(tokenizer).compile_json_schema(SCHEMA)
    cheap = [_row(grammar.new_matcher(), 10.0) for _ in range(3)]
    dear = _row(Dear(grammar.new_matcher(), 2 * DEAR_ROW_S), 0.05)
    rows = [cheap[0], dear, *cheap[1:]]
    filler = MaskFiller(tokenizer.vocab_size, tokenizer.eos_token_ids)
    failed: list[tuple[Any, Exception]] = []
    steps = 0
    while not failed and steps < 100:
        filler.fill_rows(rows, lambda seq, exc: failed.append((seq, exc)))
        steps += 1
    assert [seq for seq, _ in failed] == [dear]
    assert isinstance(failed[0][1], GrammarLimitError)
    assert 2 <= steps <= 3  # 0.05 s at >= 0.02 s a step
    # Its mask was timed on its own: the cheap rows (filled together) were not charged for it.
    assert dear.grammar.dear and dear.grammar.spent_s > 0.05
    assert all(not r.grammar.alone and r.grammar.spent_s < dear.grammar.spent_s / 4 for r in cheap)


AMBIGUOUS = "start: e\ne: e e e | e e | /[a-z0-9 ]/"


def test_a_dear_row_in_the_shared_call_is_found_and_then_pays_for_itself(tokenizer: Any) -> None:
    backend = LLGuidanceEngine(tokenizer)
    grammar = backend.compile_json_schema(SCHEMA)
    cheap = [_row(grammar.new_matcher(), None) for _ in range(3)]
    cheap_text = tokenizer.encode('{"name": "Ada Lovelace the first of her name"}')
    letters = tokenizer.encode("a b c d e f g h i j k l m n o p")
    matcher = backend.compile_lark(AMBIGUOUS).new_matcher()
    for token in letters[:8]:  # its masks now take tens of ms, more at each step
        assert matcher.advance(token)
    dear = _row(matcher, None)
    rows = [*cheap, dear]
    filler = MaskFiller(tokenizer.vocab_size, tokenizer.eos_token_ids)
    failed: list[Any] = []

    def step(k: int) -> list[float]:
        """Fill the rows' masks, then advance each by its next token; the time each was charged."""
        before = [r.grammar.spent_s for r in rows]
        filler.fill_rows(rows, lambda seq, exc: failed.append(exc))
        for r in cheap:
            assert r.matcher.advance(cheap_text[k])
        assert dear.matcher.advance(letters[8 + k])
        return [r.grammar.spent_s - b for r, b in zip(rows, before, strict=True)]

    step(0)  # all four in one shared call
    assert all(r.grammar.alone for r in rows)  # it was slow: each is timed alone next step
    step(1)
    assert dear.grammar.dear and not any(r.grammar.alone or r.grammar.dear for r in cheap)
    added = step(2)  # the cheap ones together again, the dear one apart
    assert failed == []
    assert added[-1] > DEAR_ROW_S and all(a < added[-1] / 4 for a in added[:-1])
