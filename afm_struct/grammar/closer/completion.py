"""The shortest completion of a grammar from a matcher's current state.

When ``max_tokens`` is about to cut a constrained output, the generator spends the last tokens
on the fewest that make the text a complete instance (:mod:`afm_struct.decoding.length_close`
decides when).  This module answers "which tokens, and how many", in the grammar's own
language: every step is one the matcher allows, so a completion found is an instance, whatever
the terminal (a pattern, a format, a number lexer with ``multipleOf``, a tool format's tags).

The search steps forks of the matcher over a small candidate vocabulary
(:mod:`.closing_vocab`).  Forced tokens (fast-forward: required keys, the rest of an enum
value) are one move, counted by their length, exactly as the generator appends them.  Two kinds
of node:

* **structural** (a closer, separator, special token or one-token value is allowed): children
  are the first ``width`` allowed candidates, least nested result first;
* **inside a value the grammar does not let end yet** (``"nhkj`` under an email format,
  ``36000`` under ``multipleOf: 7``, ``P1`` of a duration, the first letter of a tool name):
  children are the ends of its *escape*, the nearest states where the value may end
  (:meth:`.closing_search.Search.escape`: dives, the grammar's patterns' own automata, a
  breadth-first search over the value's characters).

The search is best-first on (discrepancies, tokens): the greedy path (always the first-ordered
candidate) completes first; every escape end counts as greedy, so all branches out of a choice
the grammar leaves open (which tool, which enum value) are followed side by side, and a state
reached again (same mask and trail) is expanded once, from its shortest path.  Then paths
deviating once, twice... are expanded, each pruned once it is no shorter than the best
completion found, for at most ``refinements`` units of work.  A unit is one mask (~5-20 µs with
llguidance, more for large lexers); forks and probes cost ~1-3 µs and ~0.4 µs.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..engines.protocol import Matcher
from .hints import NO_HINTS, ClosingHints, grammar_hints
from .search import Search, accepts, allowed_ids, fork_of, is_complete
from .vocab import (
    CLOSERS,
    MINIMAL_VALUES,
    SEPARATORS,
    START,
    TRAIL_START,
    ClosingVocab,
    Depth,
    Trail,
    closing_vocab_for,
    nesting,
    open_string,
    scan,
    walk,
)

__all__ = ["CLOSERS", "DEFAULT_MAX_TOKENS", "DEFAULT_NODES", "DEFAULT_REFINEMENTS", "MINIMAL_VALUES",
           "SEPARATORS", "START", "ClosingVocab", "Depth", "accepts", "closing_vocab_for", "grammar_hints",
           "nesting", "open_string", "scan", "shortest_completion"]

# How many allowed candidates a structural node expands (the first-ordered ones).
DEFAULT_WIDTH = 3
# Units of work spent improving on the first completion found.
DEFAULT_REFINEMENTS = 48
# Units of work before a first completion (a request's plan, even through a 40-character format).
DEFAULT_NODES = 4000
# No completion longer than this is searched for (a cut this far from the end cannot be saved).
DEFAULT_MAX_TOKENS = 512
def shortest_completion(matcher: Matcher, vocab: ClosingVocab, *, vocab_size: int,
                        decode: Callable[[list[int]], str], state: Sequence[Any] = START,
                        prefix: Sequence[int] = (), width: int = DEFAULT_WIDTH,
                        refinements: int = DEFAULT_REFINEMENTS, nodes: int = DEFAULT_NODES,
                        max_tokens: int = DEFAULT_MAX_TOKENS, hints: ClosingHints | None = None,
                        content: str | None = None, time_limit: float | None = None) -> list[int] | None:
    """The fewest tokens (found within the caps) after ``prefix`` that complete the grammar.

    ``matcher`` is not touched (the search steps forks of it).  ``state`` is :func:`scan` of the
    constrained text so far, and ``content`` the raw text of the string it ends inside, if any
    (:func:`open_string`; it lets a pattern's automaton finish the string); ``decode`` turns
    tokens into text.  Forced tokens are taken as the generator takes them (fast-forward), so
    ``len(result)`` is the budget the completion needs.  ``hints``: the grammar's patterns
    (by default the matcher's ``closing_hints``).  A matcher that can end a block the grammar
    does not constrain (a reasoning gate inside its thinking block: ``closing_prefix()``) gets
    those tokens first, in the result.  Returns ``[]`` when the text is already complete; None
    when the matcher cannot fork, rejects ``prefix``, or no completion was found within
    ``nodes`` units of work or ``max_tokens`` tokens.  ``time_limit`` (seconds) bounds a
    search whose grammar has slow masks (a lexer built from a huge pattern: ~1 ms a mask); it
    only binds there, and makes that search's result depend on the machine.
    """
    deadline = None if time_limit is None else time.perf_counter() + time_limit
    if hints is None:
        hints = getattr(matcher, "closing_hints", NO_HINTS)
    root = fork_of(matcher)  # faithful: the prefix is what the model wrote
    if root is None:
        return None
    for t in prefix:
        if not root.advance(t):
            return None
    trail: Trail = (*tuple(state[:3]), 0, 0)  # type: ignore[assignment]
    if prefix:
        text = decode(list(prefix))
        if trail[1] and content is not None:
            content = open_string('"' + content + text)
        else:
            content = open_string(text, in_string=bool(trail[1]))
        trail = walk(text, trail)
    lead: list[int] = []
    closing = getattr(root, "closing_prefix", None)
    if closing is not None:
        lead = list(closing())
        if lead:
            if not all(root.advance(t) for t in lead):
                return None
            trail, content = TRAIL_START, None  # the constrained text starts after the block
    search_root = getattr(root, "closing_root", None)  # a gate: searched in its answer state
    if search_root is not None:
        root = search_root()
        if root is None:
            return None
    if is_complete(root):
        return lead
    search = Search(vocab, vocab_size, decode, width=width, max_tokens=max_tokens - len(lead), work=nodes,
                     hints=hints, content=content if trail[1] else None, root_in_string=bool(trail[1]),
                     deadline=deadline)
    found = _best_first(root, trail, search, refinements)
    return None if found is None else lead + found


def _best_first(root: Matcher, trail: Trail, search: Search, refinements: int) -> list[int] | None:
    """Best-first on (discrepancies, tokens) from ``root`` (see the module docstring)."""
    vocab = search.vocab
    tie = itertools.count()
    heap: list[tuple[int, int, int, list[int], Trail, Matcher]] = [(0, 0, next(tie), [], trail, root)]
    best: list[int] | None = None
    expanded: dict[Any, int] = {}  # (mask, trail) -> fewest tokens it was expanded at
    capped = False  # a greedy path ran past max_tokens
    while heap:
        if best is None and (search.work <= 0 or (capped and heap[0][0] > 0)):
            break  # no deviation from a greedy path is hundreds of tokens shorter
        disc, cost, _, path, tr, node = heapq.heappop(heap)
        if best is not None and cost + 1 >= len(best):
            continue  # no child of this node can beat the completion found
        forced = node.forced_tokens()
        moves: list[tuple[int, list[int], Trail, Matcher | None]] = []  # (rank, tokens, trail, child)
        if forced:
            moves.append((0, forced, walk(search.text(forced), tr), None))
        else:
            row = search.fill(node)
            key = (hash(row.tobytes()), tr)
            if expanded.get(key, cost + 1) <= cost:
                continue  # the same state was expanded from a path no longer than this one
            expanded[key] = cost
            ok = vocab.allowed(row)
            if vocab.structural(ok, tr):
                picks = [int(vocab.tokens[i]) for i in vocab.ordered(row, tr, search.width, ok)]
                if len(picks) < search.width:  # e.g. only ``{"`` may start the answer after a gate
                    picks += [t for t in allowed_ids(row, search.vocab_size, search.width + len(picks))
                              if t not in picks][:search.width - len(picks)]
                moves = [(rank, [t], walk(search.text([t]), tr), None) for rank, t in enumerate(picks)]
            else:
                ends = search.escape(node, tr, row.copy(), path)
                moves = [(0, run, after, child) for run, after, child in ends]
            if search.hints.terminators:  # raw text's end tag: greedy, as the mask cannot show it
                ends = search.terminator_moves(node, tr)
                moves = [(0, run, after, child) for run, after, child in ends] + moves
        for rank, run, after, child in moves:
            if child is None:
                child = fork_of(node)
                if child is None or not all(child.advance(t) for t in run):
                    continue
            new_path = path + run
            if len(new_path) > search.max_tokens:
                capped = capped or disc + rank == 0
                continue
            if best is not None and len(new_path) >= len(best):
                continue
            if is_complete(child):
                best = new_path
                search.work = min(search.work, refinements)  # from now on only refinements
                continue
            heapq.heappush(heap, (disc + rank, len(new_path), next(tie), new_path, after, child))
        if best is not None and search.work <= 0:
            break
    return best
