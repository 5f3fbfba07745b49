"""The shortest completion of a grammar from a matcher's current state.

When ``max_tokens`` is about to cut a constrained output, the generator spends the last tokens
on the fewest that make the text a complete instance (:mod:`afm_struct.decoding.closing`
decides when).  This module answers "which tokens, and how many": a bounded search over forks
of the matcher, stepping only a small candidate vocabulary (:class:`ClosingVocab`): tokens made
of closers (``"`` ``]`` ``}``) and separators, one-token minimal values (``0``, ``""``,
``false``, ``null``, ``[]``, ``{}``), single printable characters (patterns, enums, digits of a
number) and the tokenizer's special tokens (a tool format's close tag).  The grammar's mask says
which candidates are allowed at a node; forced tokens (fast-forward: required keys, the rest of
an enum value) are one move, counted by their length, exactly as the generator appends them.

Which allowed candidate to try first comes from a JSON nesting depth tracked along the text
(:func:`scan`: open brackets plus an open string): the candidate that leaves the text least
nested, then the static rank.  Inside a string that is the closing quote (``]]`` there is only
content); after a value it is the closer; at a value position a complete one-token value.

The search is best-first on (discrepancies, tokens): the greedy path (always the first-ordered
candidate) completes first; then paths deviating from it once, twice... are expanded, each
pruned once it is no shorter than the best completion found, for at most ``refinements`` nodes.
A search costs (greedy length + refinements) masks, each ~5-20 µs with llguidance, plus forks
(~1-3 µs).
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from .engine import Matcher, allocate_bitmask

# Characters that end an open value, and those that separate values.
CLOSERS = frozenset('"]}')
SEPARATORS = frozenset(",:")
# Complete JSON values written as one token, cheapest first (tried where a value may start).
MINIMAL_VALUES = ("0", '""', "false", "null", "[]", "{}", "true", "1")
# How many allowed candidates a node expands (the first-ordered ones).
DEFAULT_WIDTH = 3
DEFAULT_REFINEMENTS = 24
# No completion longer than this is searched for (a cut this far from the end cannot be saved).
DEFAULT_MAX_TOKENS = 512

# Scanner state: (open brackets, inside a string, right after a backslash in a string).
Depth = tuple[int, bool, bool]
START: Depth = (0, False, False)


def scan(text: str, state: Depth = START) -> Depth:
    """``state`` after ``text``: JSON nesting, counted loosely (any ``[``/``{`` opens, any
    ``]``/``}`` closes, never below 0; text outside JSON, such as a tool tag, only moves it
    where it has brackets)."""
    depth, in_str, esc = state
    for c in text:
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth = max(depth - 1, 0)
    return depth, in_str, esc


def _content(text: str, in_str: bool) -> int:
    """Characters of ``text`` that land inside a string, starting in or out of one."""
    count, esc = 0, False
    for c in text:
        if in_str:
            if esc or c == "\\":
                esc = not esc and c == "\\"
                count += 1
            elif c == '"':
                in_str = False
            else:
                count += 1
        elif c == '"':
            in_str = True
    return count


def nesting(state: Depth) -> int:
    """How much is open: brackets plus an open string."""
    return state[0] + int(state[1])


def _rank(text: str) -> tuple[int, ...] | None:
    """Static order of a candidate token's text (lower first); None: not a candidate.

    Tokens that close the most first (``"]}`` before ``"]`` before ``"``), then special tokens,
    bare separators (they end a number: ``12,`` rather than ``120``), minimal values, digits,
    letters, other single characters, whitespace.
    """
    if not text:
        return None
    core = text.strip(" ")
    if core and all(c in CLOSERS or c in SEPARATORS for c in core) and len(text) - len(core) <= 1:
        closers = sum(c in CLOSERS for c in core)
        if closers:
            return (0, -closers, len(core) - closers, len(text))
        return (2, len(text))
    if text in MINIMAL_VALUES:
        return (3, MINIMAL_VALUES.index(text))
    if core and all(c in '"[]{},:' for c in core) and len(text) - len(core) <= 1:
        # Openers mixed with closers (``{}}``, ``[],``, ``{"``): a value and its end in one token.
        return (3, len(MINIMAL_VALUES) + len(core), -sum(c in CLOSERS for c in core))
    if len(text) == 1:
        if text.isascii() and text.isdigit():
            return (4, int(text))
        if text.isascii() and text.isalpha():
            return (5, text.islower(), ord(text))
        if text.isascii() and text.isprintable() and text != " ":
            return (6, ord(text))
        if text in (" ", "\n"):
            return (8, ord(text))
    return None


class ClosingVocab:
    """The candidate tokens of one tokenizer in static order, with their mask coordinates and
    their effect on :func:`scan`'s state from the two common starting modes."""

    def __init__(self, tokens: Sequence[int], texts: Sequence[str]) -> None:
        self.tokens = np.asarray(tokens, dtype=np.int64)
        self.texts = list(texts)
        self.words = self.tokens // 32
        self.bits = (self.tokens % 32).astype(np.uint32)
        # Effect from outside a string and from inside one: (depth change, end in string, end
        # in escape).  Precomputed so ordering children costs no per-candidate Python.
        self._effects = {in_str: [scan(t, (64, in_str, False)) for t in self.texts]
                         for in_str in (False, True)}
        # Sort key: nesting after the token, then characters it writes inside strings (a quote
        # closing a string beats ``}"``, which adds a ``}`` to the value first), then rank.
        self._after = {in_str: np.array([(d - 64 + int(s)) * 16 + min(_content(t, in_str), 15)
                                         for t, (d, s, _) in zip(self.texts, eff, strict=True)])
                       for in_str, eff in self._effects.items()}
        self.text_of = dict(zip(self.tokens.tolist(), self.texts, strict=True))

    def ordered(self, row: np.ndarray, state: Depth, limit: int) -> list[int]:
        """Indices of the allowed candidates, least nested result first, at most ``limit``."""
        words = row.view(np.uint32)[self.words]
        ok = np.flatnonzero((words >> self.bits) & 1)
        if ok.size == 0:
            return []
        if state[2]:  # mid-escape: rare, scan each allowed candidate
            after = np.array([nesting(scan(self.texts[i], state)) for i in ok])
        else:
            after = self._after[state[1]][ok] + state[0] * 16
        return [int(i) for i in ok[np.argsort(after, kind="stable")[:limit]]]

    def step(self, index: int, state: Depth) -> Depth:
        """``state`` after candidate ``index``."""
        if state[2] or state[0] < 8:  # the table assumed depth 64: exact only far from 0
            return scan(self.texts[index], state)
        depth, in_str, esc = self._effects[state[1]][index]
        return depth - 64 + state[0], in_str, esc

    @classmethod
    def build(cls, texts: Iterable[tuple[int, str]], special: Iterable[tuple[int, str]] = ()) -> ClosingVocab:
        """From ``(id, decoded text)`` pairs; ``special`` ones (close tags) rank after closers."""
        ranked = []
        for tid, text in texts:
            key = _rank(text)
            if key is not None:
                ranked.append((key, tid, text))
        ranked += [((1, i), int(t), text) for i, (t, text) in enumerate(special)]
        ranked.sort()
        seen: set[int] = set()
        keep = [(t, text) for _, t, text in ranked if not (t in seen or seen.add(t))]
        return cls([t for t, _ in keep], [text for _, text in keep])


_VOCABS: dict[int, tuple[Any, ClosingVocab]] = {}
_VOCABS_LOCK = threading.Lock()


def closing_vocab_for(tokenizer: Any) -> ClosingVocab:
    """The candidate vocabulary of ``tokenizer`` (the afm_struct facade), built once (~0.3 s)."""
    with _VOCABS_LOCK:
        hit = _VOCABS.get(id(tokenizer))
        if hit is not None and hit[0] is tokenizer:
            return hit[1]
    hf = getattr(tokenizer, "hf", tokenizer)
    eos = {int(i) for i in getattr(tokenizer, "eos_token_ids", ()) or ()}
    size = int(getattr(tokenizer, "vocab_size", len(hf)))
    added = getattr(hf, "added_tokens_decoder", None) or {}
    special = sorted((int(i), str(tok.content)) for i, tok in added.items()
                     if int(i) < size and int(i) not in eos and getattr(tok, "special", False))
    skip = {i for i, _ in special} | eos
    # Only short tokens can be candidates (closers, minimal values, single characters).
    pieces = hf.convert_ids_to_tokens(list(range(size)))
    short = [i for i, p in enumerate(pieces) if p is not None and len(p) <= 6 and i not in skip]
    texts = zip(short, hf.batch_decode([[i] for i in short]), strict=True)
    vocab = ClosingVocab.build(texts, special)
    with _VOCABS_LOCK:
        _VOCABS[id(tokenizer)] = (tokenizer, vocab)
    return vocab


def _fork(matcher: Matcher) -> Matcher | None:
    fork = getattr(matcher, "fork", None)
    return fork() if fork is not None else None


def _any_allowed(row: np.ndarray, vocab_size: int, limit: int) -> list[int]:
    """The first ``limit`` token ids a bitmask row allows."""
    bits = np.unpackbits(row.view(np.uint8), bitorder="little")[:vocab_size]
    return [int(t) for t in np.flatnonzero(bits)[:limit]]


def _done(matcher: Matcher) -> bool:
    return matcher.is_accepting() or matcher.is_finished()


def shortest_completion(matcher: Matcher, vocab: ClosingVocab, *, vocab_size: int,
                        decode: Callable[[list[int]], str], state: Depth = START,
                        prefix: Sequence[int] = (), width: int = DEFAULT_WIDTH,
                        refinements: int = DEFAULT_REFINEMENTS,
                        max_tokens: int = DEFAULT_MAX_TOKENS) -> list[int] | None:
    """The fewest tokens (found within the caps) after ``prefix`` that complete the grammar.

    ``matcher`` is not touched (the search steps forks of it).  ``state`` is :func:`scan` of the
    text so far; ``decode`` turns forced tokens into text for it.  Forced tokens are taken as
    the generator takes them (fast-forward), so ``len(result)`` is the budget the completion
    needs.  Returns ``[]`` when the text is already complete; None when the matcher cannot
    fork, rejects ``prefix``, or no completion was found within the caps.
    """
    root = _fork(matcher)
    if root is None:
        return None
    for t in prefix:
        if not root.advance(t):
            return None
    if prefix:
        state = scan(decode(list(prefix)), state)
        probe = _fork(root)  # the prefix may reach a state that cannot fork (a reasoning block)
        if probe is None:
            return None
        root = probe
    if _done(root):
        return []
    mask = allocate_bitmask(1, vocab_size)
    tie = itertools.count()
    # (discrepancies, tokens so far, tie, path, scan state, matcher): the greedy path pops first.
    heap: list[tuple[int, int, int, list[int], Depth, Matcher]] = [(0, 0, next(tie), [], state, root)]
    best: list[int] | None = None
    greedy_nodes = spent = 0
    while heap:
        disc, cost, _, path, depth, node = heapq.heappop(heap)
        if best is not None and cost + 1 >= len(best):
            continue  # no child of this node can beat the completion found
        if best is None:
            greedy_nodes += 1  # until a first completion the greedy path needs a node per move
            if greedy_nodes > max_tokens:
                break
        else:
            spent += 1
            if spent > refinements:
                break
        forced = node.forced_tokens()
        if forced:
            moves = [(forced, scan(decode(forced), depth))]
        else:
            mask[0] = 0
            node.fill_mask(mask[0])
            moves = [([int(vocab.tokens[i])], vocab.step(i, depth))
                     for i in vocab.ordered(mask[0], depth, width)]
            if len(moves) < width:
                # Few candidates fit: e.g. the text ends inside a multi-byte character (only
                # continuation bytes follow), or only a token like ``{"`` may start the answer
                # after a reasoning gate.  Top up with any allowed tokens.
                have = {m[0] for m, _ in moves}
                extra = [t for t in _any_allowed(mask[0], vocab_size, width + len(moves)) if t not in have]
                moves += [([t], scan(decode([t]), depth)) for t in extra[:width - len(moves)]]
        for rank, (move, after) in enumerate(moves):
            child = _fork(node)  # None where the state cannot be searched (a reasoning block)
            if child is None or not all(child.advance(t) for t in move):
                continue
            new_path = path + move
            if len(new_path) > max_tokens or (best is not None and len(new_path) >= len(best)):
                continue
            if _done(child):
                best = new_path
                continue
            heapq.heappush(heap, (disc + rank, len(new_path), next(tie), new_path, after, child))
    return best
