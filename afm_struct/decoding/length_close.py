"""Budget-aware closing: constrained output still parses when ``max_tokens`` cuts it.

Per constrained sequence a :class:`BudgetCloser` keeps the fewest tokens that complete the
grammar from the current state (:func:`~afm_struct.grammar.closer.completion.shortest_completion`, in the
grammar's own language: patterns, formats, numbers, every branch) and, once the remaining budget
gets down to it, feeds that completion instead of what the model samples.  The sequence still
finishes with ``length`` (the client must know it was cut), but its text is a complete instance:
``{"a": "xyz`` becomes ``{"a": "xyz"}``.

When to search (a search costs ~1-6 ms, a forward pass 10-50 ms, a mask ~6 µs):

* nothing while more than :data:`ZONE` tokens remain (a default 4096-token budget never gets
  there in practice: the common case pays nothing);
* inside the zone at every step (not only near the estimate: one token can open an array item
  whose required keys cost 20 tokens more, so every token is checked): before sampling, the
  completion ``P`` from the current state (if ``len(P)`` exceeds the remaining budget, search
  harder, then close now); after sampling token ``t`` that is not ``P[0]``, the completion after
  ``t`` (and its forced run): if ``t`` would leave too little room, or its completion cannot be
  found with little room to spare, ``P`` is fed instead.  No search is needed when the model
  follows ``P``, or when ``P`` still completes after ``t`` (string or number content: checked
  with a cheap probe), or when the run the grammar forces after ``t`` and a tail of ``P``
  complete it within the room (a *repair*: ``"`` where ``P`` had ``",``, the comma forced and
  ``P``'s rest after it; ``ti`` where ``P`` spelled ``title``; far from the cut also ``P``'s
  text re-tokenized, :func:`~.plan_repair.text_repaired_plan`), and ``P`` is reused across steps
  while it stays valid.  Every plan kept is walked on a fork of the matcher to a complete
  state, as a search's result is, so a shortcut never costs validity; a repair is not always
  the shortest completion after ``t``, which only matters near the cut: there a repair that
  does not fit the room is not taken, and the search runs as before.

The text the search reads (its JSON nesting, the string being written) is the constrained span
only: each step whose mask is free text (a thinking block, prose before a tool call's opener)
moves its start past that token, so a stray ``"`` in reasoning changes nothing.  Inside a
thinking block the plan closes the block first (its close tag, then the answer's completion).

A search that finds nothing (a grammar whose masks are too slow for the search's time limit) is
retried a few steps later, and a matcher that cannot fork now (the rest of a thinking tag is
forced) is asked again next step.  The searches have a time of their own per request
(:data:`CLOSING_BUDGET_S`, not the request's grammar budget): once it is spent, the known
completion is fed the next time the model leaves it, so the output still parses.  Only an engine whose
matchers never fork (outlines-core) leaves the output as it was without closing.  A stop string
that occurs in the closing text still stops the output there (stop strings win over everything).

When ``max_tokens`` is below the shortest output the grammar allows (:func:`min_output_tokens`),
no output can be valid: :func:`check_budget` refuses such a request before it is generated.
"""

from __future__ import annotations

import codecs
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import InvalidRequestError
from ..grammar.closer.completion import accepts, closing_vocab_for, shortest_completion
from ..grammar.closer.vocab import START, ClosingVocab, Depth, follow
from ..grammar.engines.protocol import Matcher
from .masking import allows_most
from .output_floor import length_floor, output_floor
from .plan_repair import repaired_plan, text_repaired_plan

if TYPE_CHECKING:
    from ..models.tokenizer import Tokenizer

# Remaining budget from which every step is checked.  Completions longer than this are not
# searched for either (grammar/closer/completion.py DEFAULT_MAX_TOKENS is larger).
ZONE = 256
# Time limits of one search (they bind only on grammars with slow masks; see shortest_completion).
STEP_SECONDS = 0.5
THOROUGH_SECONDS = 1.0
# Units of work a thorough search spends improving on its first completion: before giving up on a
# valid output, and for the admission check (every branch of a tool choice, say).
THOROUGH_REFINEMENTS = 3000
# The admission search (once per compiled grammar, off the event loop): outputs up to this long,
# this much work and time (a schema of 60 required objects needs ~2,000 tokens and ~1 s).
ADMISSION_MAX_TOKENS = 4096
ADMISSION_NODES = 30000
ADMISSION_SECONDS = 2.0
# The closer's own time for one request (CPU seconds of its searches, on the scheduler thread).
# Its searches are the server's safety net, not the client's grammar, so they are not charged to
# the request's grammar budget (decoding/grammar_budget.py): a request must not fail for them.
# Once this is spent the closer searches no more and, the next time the model leaves the known
# completion, feeds that completion: the output ends ``length``, valid, before ``max_tokens``.
# (A byte-level vocabulary under a deep schema at temperature 1.5 spends ~3.6 s over a 256-token
# zone: tests/fuzz/test_regressions.py's CMOA record.)
CLOSING_BUDGET_S = 4.0
# Steps to wait before searching again after a search found nothing (doubling, up to this).
RETRY_MAX = 8
# A token after which no completion was found is still taken while the budget left exceeds twice
# the known completion by this much (the next step searches again).
SLACK = 16


class BudgetCloser:
    """The closing policy of one sequence (see the module docstring)."""

    __slots__ = (
        "_content", "_decode", "_failures", "_near", "_retry_at", "_rough", "_scanned",
        "_span", "_start", "_state", "_token_bytes", "_utf8", "_vocab", "_vocab_size", "closed",
        "closing", "estimate", "in_zone", "limit_s", "plan", "search_cpu_s", "search_wall_s",
        "searches",
    )

    def __init__(self, vocab: ClosingVocab, vocab_size: int,
                 decode: Callable[[list[int]], str],
                 token_bytes: Callable[[int], bytes] | None = None,
                 limit_s: float | None = CLOSING_BUDGET_S, start: Sequence[int] | None = None) -> None:
        self._vocab = vocab
        # The grammar's shortest output from its start, when admission already searched for it
        # (:func:`known_shortest_output`): the first plan, without searching again per request.
        self._start = start
        self._vocab_size = vocab_size
        self._decode = decode
        self._token_bytes = token_bytes or (lambda t: decode([t]).encode())
        self._utf8 = _utf8_decoder()
        self.estimate: int | None = None  # length of the last completion found
        self.in_zone = False
        # The shortest completion known from the current state (inside the zone).
        self.plan: list[int] | None = None
        self.closing: list[int] | None = None  # decided: feed this next
        self.closed = False  # the completion was fed: finish with "length"
        self.searches = 0
        # What the searches took: wall time (kept out of the grammar budget's charge) and the
        # thread's CPU time (against ``limit_s``: the machine's load does not count).
        self.search_wall_s = 0.0
        self.search_cpu_s = 0.0
        self.limit_s = limit_s
        self._failures = 0
        self._retry_at = 0
        # The plan came from a search without refinements (room to spare): its length is an
        # upper bound on the completion's, not always the least; ``_near``: the room got down
        # to where the plan's exact length may decide the cut (no rough search from then on).
        self._rough = False
        self._near = False
        # The constrained span starts at token ``_span``; ``_state``/``_content`` follow it up to
        # token ``_scanned``.
        self._span = 0
        self._scanned = 0
        self._state: Depth = START
        self._content: str | None = None

    # -- the text the search reads -----------------------------------------------------------

    def observe(self, row: np.ndarray, tokens: Sequence[int]) -> None:
        """The mask of the next token: if it is free text (a newline and most of the vocabulary
        allowed: a thinking block, prose before a tool call), the constrained span starts after
        that token.  Called every step; costs a bit test, and a count only where a newline is
        allowed."""
        newlines = self._vocab.newlines
        if newlines and not any((int(row[t >> 5]) >> (t & 31)) & 1 for t in newlines):
            return
        if allows_most(row, self._vocab_size):
            self._span = len(tokens) + 1

    def _text_state(self, tokens: Sequence[int]) -> tuple[Depth, str | None]:
        """:func:`scan` state and open string of the constrained span (followed incrementally)."""
        if self._scanned < self._span:
            self._scanned, self._state, self._content = min(self._span, len(tokens)), START, None
            self._utf8 = _utf8_decoder()
        if self._scanned < len(tokens):
            text = self._new_text(tokens[self._scanned:])
            self._state, self._content = follow(text, self._state, self._content)
            self._scanned = len(tokens)
        return self._state, self._content

    def _new_text(self, ids: Sequence[int]) -> str:
        """The text ``ids`` add to what was followed.  A decode of the new tokens alone is exact
        unless byte-fallback tokens split a character across steps: a tokenizer's byte-fallback
        decoder then turns the whole run of byte tokens into U+FFFD, a ``"`` byte included, and
        the scan would think a closed string still open (a strict output cut unclosed).  Those
        steps follow the tokens' exact bytes through one incremental UTF-8 decoder."""
        text = self._decode(list(ids))
        if "\ufffd" not in text and not self._utf8.getstate()[0]:
            return text
        return self._utf8.decode(b"".join(self._token_bytes(t) for t in ids))

    def _search(self, matcher: Matcher, tokens: Sequence[int], prefix: Sequence[int] = (), *,
                thorough: bool = False, limit: int | None = None,
                refinements: int | None = None) -> list[int] | None:
        self.searches += 1
        state, content = self._text_state(tokens)
        extra: dict[str, Any] = {"refinements": THOROUGH_REFINEMENTS} if thorough else {}
        if refinements is not None:
            extra["refinements"] = refinements
        if limit is not None:
            extra["max_tokens"] = limit
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return shortest_completion(matcher, self._vocab, vocab_size=self._vocab_size, decode=self._decode,
                                       state=state, content=content, prefix=prefix,
                                       time_limit=THOROUGH_SECONDS if thorough else STEP_SECONDS, **extra)
        finally:
            self.search_wall_s += time.perf_counter() - wall
            self.search_cpu_s += time.thread_time() - cpu

    @property
    def spent(self) -> bool:
        """The closer's own time (``limit_s``) is used up: it searches no more."""
        return self.limit_s is not None and self.search_cpu_s >= self.limit_s

    # -- the policy --------------------------------------------------------------------------

    def before_sample(self, matcher: Matcher, tokens: Sequence[int], max_tokens: int,
                      row: np.ndarray | None = None) -> list[int] | None:
        """Called once the next mask (``row``) is filled: the completion to feed now, or None
        to sample."""
        if row is not None:
            self.observe(row, tokens)
        if self.closed:
            return None
        if self.closing is not None:
            return self.closing
        remaining = max_tokens - len(tokens)
        if remaining > ZONE:
            return None
        plan = self.plan if self.in_zone else None
        if plan is not None and not self._near and remaining <= _ample(plan):
            self._near = True
            if self._rough and not self.spent:
                # Found without refinements while the room was ample; near the cut its length
                # decides how much the model may still write: search once as before.
                better = self._search(matcher, tokens)
                if better is not None and len(better) <= len(plan):
                    plan, self._rough = better, False
        if plan is None:
            # (Searched even when the closer's time is spent: without a plan it cannot close;
            # the next time the model leaves this one, it is fed.)
            if len(tokens) < self._retry_at:
                return None
            plan = list(self._start) if not tokens and self._start else self._search(matcher, tokens)
            self._rough = False
        if plan is None:
            # A matcher that cannot fork now (the rest of a thinking tag is forced) may next
            # step; a search that found nothing in its limits is retried a few steps later.
            fork = getattr(matcher, "fork", None)
            if fork is not None and fork() is not None:
                self._failures += 1
                self._retry_at = len(tokens) + min(1 << self._failures, RETRY_MAX)
            self.in_zone, self.plan = False, None
            return None
        self._failures = 0
        if len(plan) > remaining and not self.spent:
            # Search harder for a completion that fits before giving up on a valid output.
            better = self._search(matcher, tokens, thorough=True, limit=remaining)
            if better is not None and len(better) <= remaining:
                plan = better
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
        if not self.in_zone or self.plan is None:
            return None
        plan = self.plan
        if plan and token == plan[0]:
            self.plan = plan[1:]  # following the plan: the rest still completes
            return None
        room = max_tokens - len(tokens) - 1  # after ``token``
        if len(plan) <= room and self._still_completes(matcher, token, plan):
            return None  # content inside a string or number: the same completion follows it
        # Far from the cut only the length bound matters: the first completion found is enough
        # (a search without refinements, ~1/3 of its time, or the plan's text re-tokenized).
        rough = not self._near and room > _ample(plan)
        repaired = self._repair(matcher, token, plan, room, rough)
        if repaired is not None:
            self.plan, self._rough = repaired[0], self._rough or repaired[1]
            return None
        if self.spent:  # no time left to search where ``token`` leads: close now, valid
            self.plan, self.closed = None, True
            return plan
        # Near the cut only a completion that fits matters: none longer is searched for (a
        # search that proves none fits stops early; the known one is fed then, as before).
        limit = room if not rough and room <= _ample(plan) else None
        after = self._search(matcher, tokens, prefix=[token], refinements=0 if rough else None, limit=limit)
        if rough and after is not None and len(after) > room:
            rough, after = False, self._search(matcher, tokens, prefix=[token])  # harder, before closing
        if after is None and room > 2 * len(plan) + SLACK:
            self.plan = None  # unknown after ``token`` (the search ran out of time), but room to spare
            return None
        if after is None or len(after) > room:
            # ``token`` would leave too little room, or leads where no completion was found
            # within the search's limits: the known completion is fed instead.
            self.plan, self.closed = None, True
            return plan
        self.plan, self._rough = after, rough
        return None

    @staticmethod
    def _still_completes(matcher: Matcher, token: int, plan: list[int]) -> bool:
        """True when ``plan`` still completes the grammar after ``token`` (with nothing forced
        in between), not a search.  Where the engine can say in one probe that ``token`` then
        ``plan`` ends complete (llguidance: a validation of them and EOS), that probe and the
        forced-run check after ``token`` are all it costs; otherwise a fork consumes the plan
        token by token (~14 µs each: most of the closer's time per step in the zone, issue 40)."""
        run = [token, *plan]
        completes = getattr(matcher, "completes_with", None)
        verdict = completes(run) if completes is not None else None
        if verdict is False or (verdict is None and not accepts(matcher, run)):
            return False
        fork = getattr(matcher, "fork", None)
        probe = fork() if fork is not None else None
        # A forced run after ``token`` is appended by the generator before the plan's next
        # token: the plan then no longer follows as is (review() repairs or searches).
        if probe is None or not probe.advance(token) or probe.forced_tokens():
            return False
        if verdict:
            return True
        return all(probe.advance(t) for t in plan) and (probe.is_accepting() or probe.is_finished())

    def _repair(self, matcher: Matcher, token: int, plan: list[int], room: int,
                rough: bool) -> tuple[list[int], bool] | None:
        """:func:`~.plan_repair.repaired_plan`, else (``rough``: far from the cut) its text
        repair (rough: an upper bound, refined near the cut), its time counted as a search's."""
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            found = repaired_plan(matcher, token, plan, room)
            if found is not None:
                return found, False
            found = text_repaired_plan(matcher, token, plan, room, self._vocab) if rough else None
            return None if found is None else (found, True)
        finally:
            self.search_wall_s += time.perf_counter() - wall
            self.search_cpu_s += time.thread_time() - cpu

    def advanced(self, run: Sequence[int]) -> None:
        """The generator appended ``run[1:]`` (forced tokens) after the sampled ``run[0]``."""
        if self.plan is None or len(run) <= 1:
            return
        forced = list(run[1:])
        if self.plan[:len(forced)] == forced:
            self.plan = self.plan[len(forced):]
        else:
            self.plan = None  # recompute at the next step


def _ample(plan: Sequence[int]) -> int:
    """The room beyond which ``plan``'s exact length cannot decide the cut yet: a rough plan
    is taken there, and refined once the room gets down to it."""
    return 2 * len(plan) + SLACK


def _utf8_decoder() -> codecs.IncrementalDecoder:
    return codecs.getincrementaldecoder("utf-8")("replace")


# -- admission: the shortest output a grammar allows ---------------------------------------------

_SHORTEST: weakref.WeakKeyDictionary[Any, list[int] | None] = weakref.WeakKeyDictionary()
_SHORTEST_LOCK = threading.Lock()


def shortest_output(constraint: Any, tokenizer: Tokenizer) -> list[int] | None:
    """The shortest output ``constraint`` allows, as the closing search finds it from the
    grammar's start (every branch: all tools of a tool choice), cached per compiled grammar;
    None when the constraint does not restrict tokens, its matchers cannot fork, or the search
    finds nothing within its limits."""
    grammar = getattr(constraint, "grammar", None)
    if grammar is None:
        return None
    with _SHORTEST_LOCK:
        if grammar in _SHORTEST:
            return _SHORTEST[grammar]
    matcher = constraint.new_matcher()
    found = None if matcher is None else shortest_completion(
        matcher, closing_vocab_for(tokenizer), vocab_size=int(tokenizer.vocab_size), decode=tokenizer.decode,
        refinements=THOROUGH_REFINEMENTS, nodes=ADMISSION_NODES, max_tokens=ADMISSION_MAX_TOKENS,
        time_limit=ADMISSION_SECONDS)
    with _SHORTEST_LOCK:
        _SHORTEST[grammar] = found
    return found


def known_shortest_output(constraint: Any) -> list[int] | None:
    """:func:`shortest_output` of ``constraint`` if it was already searched for, else None
    (never searches: the generator's thread asks)."""
    grammar = getattr(constraint, "grammar", None)
    with _SHORTEST_LOCK:
        return None if grammar is None else _SHORTEST.get(grammar)


def min_output_tokens(constraint: Any, tokenizer: Tokenizer,
                      usable: Callable[[str], bool] | None = None) -> int | None:
    """Tokens of :func:`shortest_output`, or of its shortest prefix whose text is already
    ``usable`` (a tool call is whole once its arguments are: the format's close tag after them
    can be cut); None when unknown."""
    found = shortest_output(constraint, tokenizer)
    if found is None:
        return None
    if usable is not None:
        for k in range(len(found) + 1):
            if usable(tokenizer.decode(found[:k])):
                return k
    return len(found)


def check_budget(constraint: Any, tokenizer: Tokenizer, budget: int, *, param: str,
                 limited_by_context: bool = False, usable: Callable[[str], bool] | None = None) -> int:
    """Raise a 400 when ``budget`` tokens cannot hold the shortest output ``constraint`` allows
    (:func:`min_output_tokens`; when that is unknown, the proven floor of
    :func:`~.output_floor.output_floor`): no output could then be valid.  ``param`` names the
    request field that set the budget; ``limited_by_context``: the model's context, not that
    field, left it.  Returns that shortest length (the floor the answer needs)."""
    # What the schema's own keywords force (minItems, minLength, ...): the grammar search
    # gives up on such lengths, and a downgraded grammar allows shorter (invalid) outputs.
    forced = length_floor(constraint, tokenizer)
    if forced > budget:
        minimum, bound = forced, "every output the requested format allows needs at least"
    else:
        minimum = min_output_tokens(constraint, tokenizer, usable)
        bound = "the shortest output the requested format allows is"
    if minimum is None:
        # The search gave up on this grammar: refuse what is provably too small (a call cut
        # before its name, say), from the floor under every output (output_floor.py).
        minimum = output_floor(constraint, tokenizer, usable)
        bound = "every output the requested format allows needs at least"
    if minimum <= budget:
        return minimum
    if limited_by_context:
        raise InvalidRequestError(
            f"the prompt leaves {budget} tokens of the model's context for the completion, but "
            f"{bound} {minimum} tokens; shorten the messages", param="messages", code="max_tokens_too_small")
    raise InvalidRequestError(
        f"{param} is {budget}, but {bound} {minimum} tokens; raise {param} to at least {minimum}",
        param=param, code="max_tokens_too_small")
