"""The search state of one closing search, and its way out of a value that may not end yet.

:func:`afm_struct.grammar.closer.completion.shortest_completion` expands nodes best-first; a node inside
a value the grammar does not let end yet (a pattern, a format, a number with ``multipleOf``, the
first letter of a tool name) is left through :meth:`Search.escape`: the nearest states where
the value may end.  Inside a string: for free content one dive (the first allowed character,
a hinted separator first) and else the shortest endings under the grammar's patterns
(:mod:`.closing_hints`); for a choice among a few values, every first character and a dive from
each state they reach; then a breadth-first search over the allowed characters keeping one
state per (mask, :data:`~.closing_vocab.Trail`) per layer.  In a number, a beam over its
digits whose ends are probed with ``accepts`` (its state does not show in the mask).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..engines.protocol import Matcher, allocate_bitmask
from .hints import ClosingHints
from .vocab import ClosingVocab, Trail, open_string, walk

# States an escape layer keeps.
ESCAPE_BEAM = 24
# Layers of an escape outside strings (digits of a number).
NUMBER_DIGITS = 24
# Dives an escape tries after its first layer (one per state reached), and their length.
DIVES = 4
DIVE = 32
# Escape ends returned (each becomes a branch: tool names, enum values).
ESCAPE_ENDS = 16
# Allowed tokens outside the candidates tried where no candidate is allowed (a split character).
TOP_UP = 4

_Node = tuple[list[int], Trail, Matcher]
_Layered = tuple[list[int], Trail, Matcher, "np.ndarray | None"]


def fork_of(matcher: Any) -> Any:
    """A fork of ``matcher``, or None where it cannot fork."""
    fork = getattr(matcher, "fork", None)
    return fork() if fork is not None else None


def accepts(matcher: Matcher, tokens: list[int]) -> bool:
    """Whether the grammar would take all of ``tokens`` from ``matcher``'s state (``matcher``
    unchanged): the engine's ``accepts`` where it has one, else on a fork."""
    probe = getattr(matcher, "accepts", None)
    if probe is not None:
        return bool(probe(tokens) == len(tokens))
    fork = fork_of(matcher)
    return fork is not None and all(fork.advance(t) for t in tokens)


def allowed_ids(row: np.ndarray, vocab_size: int, limit: int) -> list[int]:
    """The first ``limit`` token ids a bitmask row allows."""
    bits = np.unpackbits(row.view(np.uint8), bitorder="little")[:vocab_size]
    return [int(t) for t in np.flatnonzero(bits)[:limit]]


def is_complete(matcher: Matcher) -> bool:
    """True when the text so far is an instance (or nothing but EOS may follow)."""
    return matcher.is_accepting() or matcher.is_finished()


def _settled(ends: dict[Any, _Node]) -> bool:
    """Whether an escape's layers may stop: some end is not only a new string's start."""
    return any(not (isinstance(key, tuple) and key[0] == "string") for key in ends)


class Search:
    """One search's shared state: vocabulary, hints, a scratch mask and the work left."""

    def __init__(self, vocab: ClosingVocab, vocab_size: int, decode: Callable[[list[int]], str], *,
                 width: int, max_tokens: int, work: int, hints: ClosingHints,
                 content: str | None, root_in_string: bool, deadline: float | None = None) -> None:
        self.vocab = vocab
        self.vocab_size = vocab_size
        self.decode = decode
        self.width = width
        self.max_tokens = max_tokens
        self.work = work
        self.hints = hints
        self._hinted: np.ndarray | bool | None = False  # computed on the first escape
        self.deadline = deadline
        self.content = content  # the raw text of the string open at the root, if known
        self.root_in_string = root_in_string
        self.mask = allocate_bitmask(1, vocab_size)
        # Escapes by (mask, string state, value length): their ends' relative runs.
        self._escapes: dict[Any, list[list[int]]] = {}

    @property
    def hinted(self) -> np.ndarray | None:
        """Which candidates the grammar's patterns treat apart (parses them on first use)."""
        if self._hinted is False:
            chars = self.hints.chars
            self._hinted = self.vocab.hinted(chars) if chars else None
        return self._hinted  # type: ignore[return-value]

    def fill(self, node: Matcher) -> np.ndarray:
        """``node``'s mask in the scratch row (valid until the next fill)."""
        row = self.mask[0]
        row[:] = 0
        node.fill_mask(row)
        self.work -= 1
        if self.deadline is not None and self.work % 16 == 0 and time.perf_counter() > self.deadline:
            self.work = min(self.work, 0)  # out of time: a grammar whose masks are slow
        return row

    def text(self, tokens: list[int]) -> str:
        """The text of ``tokens`` (a candidate's from the table, else decoded)."""
        if len(tokens) == 1:
            hit = self.vocab.text_of.get(tokens[0])
            if hit is not None:
                return hit
        return self.decode(tokens)

    def step(self, node: Matcher, token: int) -> tuple[Matcher, list[int]] | None:
        """A fork of ``node`` after ``token`` and the tokens the grammar then forces."""
        child = fork_of(node)
        if child is None or not child.advance(token):
            return None
        forced = child.forced_tokens()
        if forced and not all(child.advance(t) for t in forced):
            return None
        return child, [token, *forced]

    def ends_value(self, node: Matcher, trail: Trail) -> bool:
        """Whether the value being written may end at ``node`` (or the grammar is complete)."""
        return is_complete(node) or self.vocab.structural(self.vocab.allowed(self.fill(node)), trail)

    def characters(self, row: np.ndarray, in_string: bool) -> list[int]:
        """The allowed one-character candidates an escape steps (inside a string one member of
        a class allowed whole: a pattern's mask treats them alike, but a number's remainder
        does not), or a few allowed tokens where none is one (a split character: only its
        continuation bytes may follow)."""
        ok = self.vocab.characters(self.vocab.allowed(row), self.hinted, sample=in_string)
        if ok.size:
            return [int(t) for t in self.vocab.tokens[ok]]
        return allowed_ids(row, self.vocab_size, TOP_UP)

    def terminator_moves(self, node: Matcher, trail: Trail) -> list[_Node]:
        """The grammar's lazy-lexeme terminators (:attr:`ClosingHints.terminators`) that the
        matcher takes at ``node``, each as one move (tokens, trail after, the state after)."""
        moves: list[_Node] = []
        for end in self.hints.terminators:
            tokens = [self.vocab.char_token.get(c) for c in end]
            if any(t is None for t in tokens) or not accepts(node, tokens):  # type: ignore[arg-type]
                continue
            child = fork_of(node)
            if child is not None and all(child.advance(t) for t in tokens):  # type: ignore[arg-type]
                moves.append((list(tokens), walk(end, trail), child))  # type: ignore[arg-type]
        return moves

    def value_so_far(self, path: list[int]) -> str | None:
        """The decoded string open after ``path`` (None: unknown, or mid-escape)."""
        text = self.decode(path) if path else ""
        if self.root_in_string:
            if self.content is None:
                raw = open_string(text, in_string=True)
            else:
                raw = open_string('"' + self.content + text)
        else:
            raw = open_string(text)
        if raw is None:
            return None
        try:
            value = json.loads('"' + raw + '"')
        except ValueError:
            return None
        return value if isinstance(value, str) else None

    def pattern_ends(self, node: Matcher, trail: Trail, path: list[int]) -> tuple[list[_Node], list[_Node]]:
        """Endings of the open string under the grammar's patterns that the matcher takes:
        (those after which the string may end, those after which it may not yet: another
        keyword, such as ``minLength``, still holds it open)."""
        if not self.hints.patterns:
            return [], []
        value = self.value_so_far(path)
        if value is None:
            return [], []
        ends, open_ = [], []
        for ending in self.hints.completions(value)[:4]:
            raw = json.dumps(ending, ensure_ascii=False)[1:-1]
            tokens = [self.vocab.char_token.get(c) for c in raw]
            if any(t is None for t in tokens) or not accepts(node, tokens):  # type: ignore[arg-type]
                continue
            child = fork_of(node)
            if child is None or not all(child.advance(t) for t in tokens):  # type: ignore[arg-type]
                continue
            after = walk(raw, trail)
            (ends if self.ends_value(child, after) else open_).append((list(tokens), after, child))  # type: ignore[arg-type]
        return ends, open_

    def escape(self, node: Matcher, trail: Trail, row: np.ndarray, path: list[int]) -> list[_Node]:
        """The nearest states after ``node`` (mask ``row``, reached by ``path``) where the value
        being written may end, or the grammar is complete (see the module docstring).  Paths
        are relative to ``node``."""
        base = len(path)
        key = (hash(row.tobytes()), trail[1], trail[2], trail[4])
        known = self._escapes.get(key)
        if known is not None:  # the same state reached by another path: replay its ends
            replayed = [end for run in known if (end := self._replay(node, trail, run)) is not None]
            if replayed:
                return replayed
        ends = self._escape(node, trail, row, path, base)
        self._escapes[key] = [run for run, _, _ in ends]
        return ends

    def _replay(self, node: Matcher, trail: Trail, run: list[int]) -> _Node | None:
        child = fork_of(node)
        if child is None or not all(child.advance(t) for t in run):
            return None
        return run, walk(self.text(run), trail), child

    def _escape(self, node: Matcher, trail: Trail, row: np.ndarray, path: list[int],
                base: int) -> list[_Node]:
        if trail[1] and not self.vocab.characters(self.vocab.allowed(row)).size:
            # Mid-character (a byte-level vocabulary's lead byte: only continuation bytes may
            # follow): finish the character first.  From here no ending the patterns' automata
            # spell is taken, and the layers would merge every state they reach.
            whole = self._finish_character(node, trail, row, base)
            if whole is not None:
                rel, after, at, at_row = whole
                if is_complete(at) or self.vocab.structural(self.vocab.allowed(at_row), after):
                    return [(rel, after, at)]
                ends = self._escape(at, after, at_row, path + rel, base + len(rel))
                return [(rel + run, end_trail, child) for run, end_trail, child in ends]
        if trail[1] and len(self.characters(row, True)) > ESCAPE_ENDS:
            # Free content (not a choice among a few names): one dive, else the patterns' endings.
            dive = self._dive([], trail, node, row, base)
            if dive is not None:
                return [dive]
            found = self.pattern_ends(node, trail, path)[0]
            if found:
                return sorted(found, key=lambda e: len(e[0]))
        ends, layer = self._layer([([], trail, node, row)], base)
        if not _settled(ends) and trail[1]:
            # Inside a string: a dive per state the first character reaches (content the
            # grammar only counts, a minLength), and the endings under the grammar's patterns
            # (a state the mask hides); else a pattern satisfied but the string still held open
            # is where the layers go on from, the rest no longer hidden.
            found, unfinished = self.pattern_ends(node, trail, path)
            dives = [self._dive(rel, tr, at, at_row, base) for rel, tr, at, at_row in layer[:DIVES]]
            ends = {**ends, **dict(enumerate([*found, *(d for d in dives if d is not None)]))}
            layer = [(run, after, child, None) for run, after, child in unfinished] + layer
        layers = self.max_tokens if trail[1] else NUMBER_DIGITS
        while not _settled(ends) and layer and self.work > 0 and layers > 0:
            layers -= 1
            layer.sort(key=lambda e: len(e[0]))
            more, layer = self._layer(layer[:ESCAPE_BEAM], base)
            ends = {**more, **ends}
        return sorted(ends.values(), key=lambda e: len(e[0]))[:ESCAPE_ENDS]

    def _layer(self, layer: list[_Layered], base: int) -> tuple[dict[Any, _Node], list[_Layered]]:
        """One breadth-first layer of an escape: (ends reached, the states to go on from)."""
        ends: dict[Any, _Node] = {}
        seen: set[Any] = set()
        nxt: list[_Layered] = []
        for rel, tr, at, at_row in layer:
            if at_row is None:
                at_row = self.fill(at).copy()
            for token in self.characters(at_row, tr[1]):
                if self.work <= 0:
                    break
                moved = self.step(at, token)
                if moved is None:
                    continue
                child, run = moved
                new = rel + run
                if base + len(new) > self.max_tokens:
                    continue
                after = walk(self.text(run), tr)
                if is_complete(child):
                    ends.setdefault(("done", after), (new, after, child))
                elif after[1] and (not tr[1] or after[3] != tr[3]):
                    # A new string opened (``: `` then the forced ``false, "uri": "``): the value
                    # escaped from has ended.  The new string is the search's to escape from, with
                    # a string's means (a dive, the patterns' automata): a layer would merge
                    # ``"0:`` into ``"00`` (same mask, same length) and never meet ``^\S+:\S+$``.
                    # The layers go on for the other branches (``"tInteger": 0`` is shorter than
                    # ``"tDate": "`` and a date-time), see :func:`_settled`.
                    ends.setdefault(("string", hash(self.fill(child).tobytes()), after), (new, after, child))
                elif not after[1] and after[4]:  # in a number: its state does not show in the mask
                    if any(accepts(child, [t]) for t in self.vocab.enders):
                        ends.setdefault(("end", after), (new, after, child))
                    else:
                        nxt.append((new, after, child, None))
                else:
                    crow = self.fill(child)
                    key = (hash(crow.tobytes()), after)
                    if self.vocab.structural(self.vocab.allowed(crow), after):
                        ends.setdefault(key, (new, after, child))
                    elif key not in seen:
                        seen.add(key)
                        nxt.append((new, after, child, crow.copy()))
        return ends, nxt

    def _take(self, node: Matcher, token: int, rel: list[int], trail: Trail,
              base: int) -> tuple[Matcher, list[int], Trail] | None:
        """``token`` (and the run it forces) taken after ``node``: the new state, the path and
        the trail; None when the engine refuses it or the path outgrows the budget."""
        moved = self.step(node, token)
        if moved is None:
            return None
        node, run = moved
        rel = rel + run
        if base + len(rel) > self.max_tokens:
            return None
        return node, rel, walk(self.text(run), trail)

    def _finish_character(self, node: Matcher, trail: Trail, row: np.ndarray,
                          base: int) -> tuple[list[int], Trail, Matcher, np.ndarray] | None:
        """The first allowed continuation bytes after ``node`` up to the first state where a
        candidate is allowed again (a whole character): (tokens, trail, state, its mask)."""
        rel: list[int] = []
        for _ in range(4):  # a UTF-8 character has at most 3 continuation bytes
            picks = allowed_ids(row, self.vocab_size, 1)
            taken = self._take(node, picks[0], rel, trail, base) if picks and self.work > 0 else None
            if taken is None:
                return None
            node, rel, trail = taken
            row = self.fill(node).copy()
            if is_complete(node) or self.vocab.characters(self.vocab.allowed(row)).size:
                return rel, trail, node, row
        return None

    def _dive(self, rel: list[int], trail: Trail, node: Matcher, row: np.ndarray | None,
              base: int) -> _Node | None:
        """Follow the first allowed character for at most :data:`DIVE` steps inside a string:
        the end reached, or None."""
        for _ in range(DIVE):
            if row is None or self.work <= 0 or not trail[1]:
                return None
            picks = self.characters(row, True)
            if self.hinted is not None:  # a hinted separator first (the ``@`` of an email)
                picks.sort(key=lambda t: not (self.vocab.text_of.get(t, "a").isalnum() is False
                                              and self.vocab.text_of.get(t, "") in self.hints.chars))
            taken = self._take(node, picks[0], rel, trail, base) if picks else None
            if taken is None:
                return None
            node, rel, trail = taken
            if is_complete(node):
                return rel, trail, node
            crow = self.fill(node)
            if self.vocab.structural(self.vocab.allowed(crow), trail):
                return rel, trail, node
            row = crow.copy()
        return None
