"""A lower bound on the tokens of any output a constraint allows.

The admission check (:func:`.closing.check_budget`) refuses a budget below the shortest output
the closing search finds.  When that search gives up on a grammar (a ``multipleOf`` it cannot
finish within its limits, say), the shortest output is unknown, but a floor under it is not:
where the grammar allows only a few tokens (the text it forces, which tool, the letters of its
name) every one of them can be followed.
:func:`output_floor` explores exactly that, cheapest first (Dijkstra over token counts), so a
tool call cut before its name (no call at all under ``tool_choice: "required"``) is refused
with a 400 instead of answered empty.

A state counts as reached when the grammar accepts there (or, for tools, when the text is
already ``usable``: its calls are whole).  A state allowing more than :data:`BRANCHES` tokens,
or left when the work budget is spent, counts as one more token, never more; a state reached
again (the same text and the same mask, as the closing search takes it) is expanded once.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import weakref
from collections.abc import Callable
from typing import Any

from ..grammar.closer.search import allowed_ids, fork_of, is_complete
from ..grammar.engines.llguidance_engine import longest_token_bytes
from ..grammar.engines.protocol import allocate_bitmask
from ..grammar.schema.min_length import min_json_bytes, min_pattern_chars

# A state allowing more tokens than this is not expanded (it needs at least one more token).
BRANCHES = 24
# Masks filled in all (each ~5-50 µs): the whole exploration stays in milliseconds.
WORK = 400


_FLOORS: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
_FLOORS_LOCK = threading.Lock()


def output_floor(constraint: Any, tokenizer: Any, usable: Callable[[str], bool] | None = None) -> int:
    """Fewest tokens any output of ``constraint`` can have (0 when unknown: a matcher that
    cannot fork); ``usable(text)``: a cut text that already counts as an output (a tool plan's
    test, which its compiled grammar determines: the floor is cached per grammar)."""
    grammar = getattr(constraint, "grammar", None)
    if grammar is None:
        return _floor(constraint, tokenizer, usable)
    with _FLOORS_LOCK:
        if grammar in _FLOORS:
            return _FLOORS[grammar]
    found = _floor(constraint, tokenizer, usable)
    with _FLOORS_LOCK:
        _FLOORS[grammar] = found
    return found


def length_floor(constraint: Any, tokenizer: Any) -> int:
    """Fewest tokens any valid output of a schema or pattern can have, from the length its
    keywords force (:mod:`~afm_struct.grammar.schema.min_length`: ``minItems``, ``minLength``,
    ``minProperties``, required members, counted repeats, ``const``/``enum`` values, ...)
    over the most bytes one token spells; 0 for other constraints.  For a strict request
    whatever rung serves it (a downgraded grammar does not make a shorter answer valid), and
    for one served exact (its grammar allows nothing shorter); 0 for a non-strict request
    served best-effort, whose answer need not meet the keywords its grammar dropped."""
    if constraint is None:
        return 0
    if not getattr(constraint, "strict", False) and getattr(constraint, "mode", "exact") != "exact":
        return 0
    kind = getattr(constraint, "kind", None)
    if kind == "json_schema" and getattr(constraint, "schema", None) is not None:
        least = min_json_bytes(constraint.schema)
    elif kind == "regex" and isinstance(getattr(constraint, "pattern", None), str):
        least = min_pattern_chars(constraint.pattern)  # a character is at least one byte
    else:
        return 0
    if getattr(tokenizer, "derived", None) is None or least <= 0:
        return 0
    return -(-least // longest_token_bytes(tokenizer))


def _floor(constraint: Any, tokenizer: Any, usable: Callable[[str], bool] | None) -> int:
    matcher = constraint.new_matcher() if constraint is not None else None
    root = fork_of(matcher) if matcher is not None else None
    if root is None:
        return 0
    vocab_size = int(tokenizer.vocab_size)
    row = allocate_bitmask(1, vocab_size)[0]
    order = itertools.count()
    # (tokens so far, tie-break, matcher at that state, the tokens)
    frontier: list[tuple[int, int, Any, list[int]]] = [(0, next(order), root, [])]
    seen: set[tuple[str, bytes]] = set()
    work = WORK

    def reached(node: Any, tokens: list[int]) -> bool:
        return is_complete(node) or (usable is not None and bool(tokens) and usable(tokenizer.decode(tokens)))

    bound: int | None = None  # the least of the states left unexpanded (each: one more token)
    while frontier:
        cost, _, node, tokens = heapq.heappop(frontier)
        if bound is not None and cost >= bound:
            return bound
        if reached(node, tokens):
            return cost
        if work <= 0:
            return cost + 1  # every state left costs at least this much, and one more token
        # Every token the mask allows, even where the grammar forces the text: the forced run
        # is one tokenization of it, a sampled token spanning more of it may be shorter.
        row[:] = 0
        node.fill_mask(row)
        work -= 1
        key = (tokenizer.decode(tokens), row.tobytes())
        if key in seen:
            continue
        seen.add(key)
        allowed = allowed_ids(row, vocab_size, BRANCHES + 1)
        children = [fork_of(node) for _ in allowed] if len(allowed) <= BRANCHES else [None]
        if any(child is None for child in children):
            bound = cost + 1 if bound is None else min(bound, cost + 1)
            continue
        for t, child in zip(allowed, children, strict=True):
            if child.advance(t):
                heapq.heappush(frontier, (cost + 1, next(order), child, [*tokens, t]))
    return bound if bound is not None else 0  # no output at all: the grammar refuses every text
