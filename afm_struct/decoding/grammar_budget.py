"""A request's budget of grammar work: the time its masks, advances, forced runs and closing
search take, summed over its steps and checked as they happen.

llguidance's parser limits (``grammar/engines/llguidance_engine.py`` DEFAULT_LIMITS) bound the Earley
items of one step, but not what each item costs: in an ambiguous grammar (``e: e e e | e e |
/[a-z]/``) every completed item walks a whole earlier row, so a step costs ~rows x items and
keeps growing under the item limit (measured: 0.03 s at the first token, 1.5 s at the 30th;
``benchmarks/hostile/README.md``).  So each row's grammar time is charged here as it is spent,
and the row that spends more than its budget ends with ``grammar_too_complex`` at that step:
the batch's other rows lose at most that one step.

Rows that share one batched mask call (``next_mask.py``) are charged an equal share of it; a
dear row among them would make cheap ones pay for it (and, its share diluted, pay too little
itself).  So a shared call slower than :data:`SLOW_SHARED_S` sends its rows to be filled one by
one at the next step, each timed alone; a row whose own fill took over :data:`DEAR_ROW_S` is
*dear*: dear rows share calls of their own (in parallel on the engine's threads, charged among
themselves) while their calls stay slow; the others go back to the shared call and are not sent
out again for :data:`CLEARED_STEPS` steps (a large batch's call may be slow for no row's fault).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import GrammarLimitError

# A request's grammar time by default (``--grammar-budget-s``).  On the development set a step
# (mask and advance) takes ~20 µs at the median and ~1 ms at the 99th percentile (498 schemas,
# 164,917 steps; benchmarks/hostile/step_limits.py): 4,096 tokens at 1 ms a step is 4 s.
DEFAULT_GRAMMAR_BUDGET_S = 5.0
# A row whose mask, filled on its own, took longer than this is dear (10x the development set's
# 99th percentile step).
DEAR_ROW_S = 0.010
# A shared mask call slower than this: its rows are filled alone next step, to find the dear ones.
SLOW_SHARED_S = 0.010
# Steps a row found cheap on its own stays in the shared call, however slow that call is.
CLEARED_STEPS = 32


@dataclass
class GrammarBudget:
    """One sequence's grammar time: ``spent_s`` so far against ``limit_s`` (None: unlimited)."""

    limit_s: float | None = DEFAULT_GRAMMAR_BUDGET_S
    spent_s: float = 0.0
    # Fill this row's mask on its own next step (not in a shared call), and time it alone.
    alone: bool = False
    # Its masks are dear: it shares calls only with other dear rows.
    dear: bool = False
    # Steps left before a slow shared call may send this row out to be timed alone again.
    cleared: int = 0

    def placed(self, *, in_call: bool, slow_call: bool, own_s: float) -> None:
        """Where this row's next mask is filled, after this one: it was filled in a shared
        engine call (``in_call``; ``slow_call`` when that call was slow) or on its own, its
        own part taking ``own_s``."""
        if in_call:
            if self.dear:
                self.dear = slow_call
                if not self.dear:
                    self.cleared = CLEARED_STEPS
            else:
                self.alone = slow_call and self.cleared == 0
                self.cleared = max(self.cleared - 1, 0)
            return
        self.alone = False
        self.dear = own_s > DEAR_ROW_S
        if not self.dear:
            self.cleared = CLEARED_STEPS

    def charge(self, seconds: float, tokens: int) -> None:
        """Add ``seconds`` of grammar work; raise :class:`GrammarLimitError` once over the
        limit (``tokens``: how many the request has generated, for the message)."""
        self.spent_s += seconds
        if self.limit_s is not None and self.spent_s > self.limit_s:
            raise budget_error(self.limit_s, tokens)


def budget_error(limit_s: float, tokens: int) -> GrammarLimitError:
    """The client's error for a request over its grammar budget."""
    return GrammarLimitError(
        f"the output's constraint took more than this server's grammar budget of {limit_s:g} s "
        f"of grammar work for one request (masks and parsing, after {tokens} tokens): the "
        "grammar is too ambiguous or too costly per token; simplify it (fewer ambiguous "
        "alternatives, longer lexemes than single characters)")
