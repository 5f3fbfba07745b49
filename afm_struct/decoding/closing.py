"""Budget-aware closing: constrained output still parses when ``max_tokens`` cuts it.

Per constrained sequence a :class:`BudgetCloser` keeps an estimate of the fewest tokens that
complete the grammar from the current state (:func:`~afm_struct.grammar.closing.shortest_completion`)
and, once the remaining budget gets down to it, feeds that completion instead of what the model
samples.  The sequence still finishes with ``length`` (the client must know it was cut), but
its text is a complete instance: ``{"a": "xyz`` becomes ``{"a": "xyz"}``.

When to search (a search costs ~1-6 ms, a forward pass 10-50 ms, a mask ~6 µs):

* nothing while more than :data:`ZONE` tokens remain (a default 4096-token budget never gets
  there in practice: the common case pays nothing);
* inside the zone at every step (not only near the estimate: one token can open an array item
  whose required keys cost 20 tokens more, so every token is checked): before sampling, the
  completion ``P`` from the current state (if ``len(P)`` exceeds the remaining budget, close
  now); after sampling token ``t`` that is not ``P[0]``, the completion after ``t`` (and its
  forced run): if ``t`` would leave too little room, ``P`` is fed instead.  No search is
  needed when the model follows ``P``, or when ``P`` still completes after ``t`` (string or
  number content: checked by consuming ``P`` on a fork), and ``P`` is reused across steps
  while it stays valid.

If ``max_tokens`` is smaller than the minimal completion itself, the output cannot parse; the
closer still steers into the completion as soon as that is known (so the output is as close to
complete as the budget allows) and never writes past ``max_tokens``.  A matcher that cannot
fork (outlines-core; a reasoning block still open, which cannot be closed for the model) leaves
the closer idle while it cannot; a search that finds nothing within its caps turns it off for
that sequence.  Either way the output is what it was without closing.  A stop string that occurs
in the closing text still stops the output there (stop strings win over everything).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..grammar.closing import ClosingVocab, Depth, scan, shortest_completion
from ..grammar.engine import Matcher

# Remaining budget from which every step is checked.  Completions longer than this are not
# searched for either (grammar/closing.py DEFAULT_MAX_TOKENS is larger).
ZONE = 256


class BudgetCloser:
    """The closing policy of one sequence (see the module docstring)."""

    __slots__ = (
        "_decode",
        "_vocab",
        "_vocab_size",
        "closed",
        "closing",
        "disabled",
        "estimate",
        "in_zone",
        "plan",
        "searches",
    )

    def __init__(self, vocab: ClosingVocab, vocab_size: int,
                 decode: Callable[[list[int]], str]) -> None:
        self._vocab = vocab
        self._vocab_size = vocab_size
        self._decode = decode
        self.estimate: int | None = None  # length of the last completion found
        self.in_zone = False
        # The shortest completion known from the current state (inside the zone).
        self.plan: list[int] | None = None
        self.closing: list[int] | None = None  # decided: feed this next
        self.closed = False  # the completion was fed: finish with "length"
        self.disabled = False
        self.searches = 0

    def _search(self, matcher: Matcher, tokens: Sequence[int],
                prefix: Sequence[int] = ()) -> list[int] | None:
        self.searches += 1
        state: Depth = scan(self._decode(list(tokens))) if tokens else scan("")
        return shortest_completion(matcher, self._vocab, vocab_size=self._vocab_size,
                                   decode=self._decode, state=state, prefix=prefix)

    def before_sample(self, matcher: Matcher, tokens: Sequence[int], max_tokens: int) -> list[int] | None:
        """Called once the next mask is filled: the completion to feed now, or None to sample."""
        if self.disabled or self.closed:
            return None
        if self.closing is not None:
            return self.closing
        remaining = max_tokens - len(tokens)
        if remaining > ZONE:
            return None
        plan = self.plan if self.in_zone and self.plan is not None else self._search(matcher, tokens)
        if plan is None:
            # A matcher that cannot fork now (a reasoning block is open) may later; a search
            # that found nothing within its caps will not do better: off for this sequence.
            fork = getattr(matcher, "fork", None)
            self.disabled = fork is not None and fork() is not None
            self.in_zone, self.plan = False, None
            return None
        self.estimate = len(plan)
        self.in_zone = True
        self.plan = plan
        if len(plan) > remaining:
            # No room for the completion: steer into it now, as much as fits (cannot parse).
            # (When it fits exactly, review() still lets the model choose a token that fits.)
            self.closing = plan[:remaining]
            return self.closing
        return None

    def review(self, matcher: Matcher, tokens: Sequence[int], token: int,
               max_tokens: int) -> list[int] | None:
        """Called with the sampled ``token`` before the matcher takes it: the run to feed
        instead (the completion), or None to keep ``token``."""
        if self.closing is not None:
            run, self.closing, self.closed = self.closing, None, True
            return run
        if self.disabled or not self.in_zone or self.plan is None:
            return None
        plan = self.plan
        if plan and token == plan[0]:
            self.plan = plan[1:]  # following the plan: the rest still completes
            return None
        if 1 + len(plan) <= max_tokens - len(tokens) and self._still_completes(matcher, token, plan):
            return None  # content inside a string or number: the same completion follows it
        after = self._search(matcher, tokens, prefix=[token])
        if after is None:
            # Unknown after ``token`` (it opened a reasoning block, or the search gave up): the
            # model's choice stands and the next step searches again.
            self.plan = None
            return None
        if 1 + len(after) > max_tokens - len(tokens):
            self.plan, self.closed = None, True
            return plan
        self.plan = after
        return None

    @staticmethod
    def _still_completes(matcher: Matcher, token: int, plan: list[int]) -> bool:
        """True when ``plan`` still completes the grammar after ``token`` (with nothing forced
        in between): one consume per plan token (~10-20 µs each), not a search (~1-5 ms)."""
        fork = getattr(matcher, "fork", None)
        probe = fork() if fork is not None else None
        if probe is None or not probe.advance(token) or probe.forced_tokens():
            return False
        return all(probe.advance(t) for t in plan) and (probe.is_accepting() or probe.is_finished())

    def advanced(self, run: Sequence[int]) -> None:
        """The generator appended ``run[1:]`` (forced tokens) after the sampled ``run[0]``."""
        if self.plan is None or len(run) <= 1:
            return
        forced = list(run[1:])
        if self.plan[:len(forced)] == forced:
            self.plan = self.plan[len(forced):]
        else:
            self.plan = None  # recompute at the next step
