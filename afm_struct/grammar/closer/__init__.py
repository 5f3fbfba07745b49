"""Closing cut output: the shortest way from a matcher's state to a complete value, and the
budgets that keep one short.

When a generation runs out of tokens inside a constrained value, :mod:`.completion` finds the
shortest completion the grammar allows (:mod:`.search` is the search's state, :mod:`.vocab` its
candidate tokens, :mod:`.hints` what it learns from the grammar's text).  The compile-time
budgets (:mod:`.literal_budget` for schemas, :mod:`.lark_budget` for grammar texts) refuse a
constraint whose forced runs of text could not be closed within the lexer's limits.
"""

from __future__ import annotations

from afm_struct.lazy_exports import lazy_getattr

# What the other rooms and layers may use: name -> its module.
_EXPORTS = {
    "ClosingHints": ".hints",
    "ClosingVocab": ".vocab",
    "Depth": ".vocab",
    "NO_HINTS": ".hints",
    "START": ".vocab",
    "accepts": ".completion",
    "allowed_ids": ".search",
    "check_forced_runs": ".literal_budget",
    "check_grammar_budgets": ".lark_budget",
    "check_grammar_size": ".lark_budget",
    "check_regex_budget": ".lark_budget",
    "closing_vocab_for": ".vocab",
    "follow": ".vocab",
    "fork_of": ".search",
    "grammar_hints": ".hints",
    "is_complete": ".search",
    "longest_forced_run": ".literal_budget",
    "shortest_completion": ".completion",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_getattr(__name__, _EXPORTS)
