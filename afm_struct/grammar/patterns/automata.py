"""Deterministic automata over an alphabet of code point classes: built from a language
expression (:class:`.regular.Lang`'s nodes) by Thompson construction, subset construction with
Python's ``^`` / ``$`` semantics, products, complements and Moore minimisation.

Every construction is bounded: past :data:`MAX_STATES` states (or :data:`MAX_NFA` NFA states,
or the :func:`budget` of work) it raises :class:`TooComplex`, never guesses.
"""

from __future__ import annotations

import bisect
import contextlib
import contextvars
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from .charsets import FULL, MAX_CP, NEWLINE, normalize, within

MAX_STATES = 200
MAX_NFA = 4000
# Work units (automaton states and transitions built) one schema's rewrites may spend in all;
# past it every question about a language answers "too complex".  See :func:`budget`.
WORK = 200_000
_left: contextvars.ContextVar[list[int]] = contextvars.ContextVar("regular_work")

Node = tuple[Any, ...]


class TooComplex(Exception):
    """An automaton or its regex would pass the bounds: no answer."""


@contextlib.contextmanager
def budget(units: int = WORK) -> Iterator[None]:
    """Bound the language work done inside (by one schema's rewrites, say) to ``units``."""
    token = _left.set([units])
    try:
        yield
    finally:
        _left.reset(token)


def spend(units: int) -> None:
    """Charge ``units`` of work to the current :func:`budget` (raises :class:`TooComplex` past it)."""
    left = _left.get(None)
    if left is not None:
        left[0] -= units
        if left[0] < 0:
            raise TooComplex


@dataclass
class Dfa:
    """A deterministic automaton: ``trans[s][atom] -> state`` (missing: rejected), start 0."""

    atoms: list[tuple[tuple[int, int], ...]]
    trans: list[dict[int, int]]
    accept: frozenset[int]
    bounds: list[int]  # sorted elementary interval starts, for fullmatch
    atom_of: list[int]  # elementary interval index -> atom

    def fullmatch(self, text: str) -> bool:
        """True when ``text`` is in the language (tests use it against Python's ``re``)."""
        state = 0
        for c in text:
            state = self.trans[state].get(self.atom_of[bisect.bisect_right(self.bounds, ord(c)) - 1], -1)
            if state < 0:
                return False
        return state in self.accept


class Builder:
    """One alphabet for a whole expression; automata for its parts over that alphabet."""

    def __init__(self, node: Node) -> None:
        sets: set[tuple[tuple[int, int], ...]] = {FULL, NEWLINE}
        stack = [node]
        while stack:
            n = stack.pop()
            if n[0] == "set":
                sets.add(n[1])
            elif n[0] in ("cat", "alt", "and", "not", "rep", "search"):
                stack.extend(c for c in n[1:] if isinstance(c, tuple))
        cuts = {0, MAX_CP + 1}
        for s in sets:
            for lo, hi in s:
                cuts.update((lo, hi + 1))
        self.bounds = sorted(cuts)[:-1]
        signature: dict[tuple[bool, ...], int] = {}
        self.atom_of: list[int] = []
        members: list[list[tuple[int, int]]] = []
        ordered = sorted(sets)
        for i, lo in enumerate(self.bounds):
            key = tuple(within(lo, s) for s in ordered)
            if key not in signature:
                signature[key] = len(members)
                members.append([])
            atom = signature[key]
            self.atom_of.append(atom)
            hi = (self.bounds[i + 1] if i + 1 < len(self.bounds) else MAX_CP + 1) - 1
            members[atom].append((lo, hi))
        self.atoms = [normalize(m) for m in members]
        self.newline = self.atom_of[bisect.bisect_right(self.bounds, 10) - 1]
        self.node = node

    def atoms_in(self, intervals: tuple[tuple[int, int], ...]) -> frozenset[int]:
        return frozenset(a for a, ivs in enumerate(self.atoms) if within(ivs[0][0], intervals))

    def build(self) -> Dfa:
        return self.dfa(self.node)

    # -- whole automata --------------------------------------------------------------

    def dfa(self, node: Node) -> Dfa:
        kind = node[0]
        if kind == "not":
            return self.minimize(self.negate(self.dfa(node[1])))
        if kind == "and":
            out = self.dfa(node[1])
            for part in node[2:]:
                out = self.minimize(self.product(out, self.dfa(part)))
            return out
        nfa = _Nfa()
        start, end = self.fragment(nfa, ("cat", ("rep", ("set", FULL), 0, None), node[1],
                                         ("rep", ("set", FULL), 0, None)) if kind == "search" else node)
        return self.minimize(self.determinize(nfa, start, end, anchored=kind == "search"))

    def negate(self, dfa: Dfa) -> Dfa:
        trans = [dict(t) for t in dfa.trans]
        sink = len(trans)
        trans.append({})
        for t in trans:
            for a in range(len(self.atoms)):
                t.setdefault(a, sink)
        accept = frozenset(range(len(trans))) - dfa.accept
        return self.make(trans, accept)

    def product(self, a: Dfa, b: Dfa) -> Dfa:
        index = {(0, 0): 0}
        order = [(0, 0)]
        trans: list[dict[int, int]] = []
        while len(trans) < len(order):
            p, q = order[len(trans)]
            row = {}
            spend(1 + len(a.trans[p]))
            for atom, p2 in a.trans[p].items():
                q2 = b.trans[q].get(atom)
                if q2 is None:
                    continue
                if (p2, q2) not in index:
                    index[(p2, q2)] = len(order)
                    order.append((p2, q2))
                    if len(order) > MAX_STATES * 4:
                        raise TooComplex
                row[atom] = index[(p2, q2)]
            trans.append(row)
        accept = frozenset(i for i, (p, q) in enumerate(order) if p in a.accept and q in b.accept)
        return self.make(trans, accept)

    def make(self, trans: list[dict[int, int]], accept: frozenset[int]) -> Dfa:
        return Dfa(self.atoms, trans, accept, self.bounds, self.atom_of)

    def minimize(self, dfa: Dfa) -> Dfa:
        """Drop states that are unreachable or reach no accepting state, then Moore refinement."""
        n = len(dfa.trans)
        spend(n * 4)
        back: list[set[int]] = [set() for _ in range(n)]
        for s, row in enumerate(dfa.trans):
            for t in row.values():
                back[t].add(s)
        live, stack = set(dfa.accept), list(dfa.accept)
        while stack:
            for p in back[stack.pop()]:
                if p not in live:
                    live.add(p)
                    stack.append(p)
        if 0 not in live:
            return self.make([{}], frozenset())
        reach, stack = {0}, [0]
        while stack:
            for t in dfa.trans[stack.pop()].values():
                if t in live and t not in reach:
                    reach.add(t)
                    stack.append(t)
        states = sorted(reach)
        trans = {s: {a: t for a, t in dfa.trans[s].items() if t in reach} for s in states}
        block = {s: int(s in dfa.accept) for s in states}
        count = len(set(block.values()))
        while True:
            sigs: dict[tuple[Any, ...], int] = {}
            new = {s: sigs.setdefault((block[s], tuple(sorted((a, block[t]) for a, t in trans[s].items()))),
                                      len(sigs)) for s in states}
            block = new
            if len(sigs) == count:
                break
            count = len(sigs)
        # Renumber from the start state's block.
        rep: dict[int, int] = {}
        for s in states:
            rep.setdefault(block[s], s)
        remap, order, rows = {block[0]: 0}, [0], []
        while len(rows) < len(order):
            s = order[len(rows)]
            row = {}
            for a, t in trans[s].items():
                if block[t] not in remap:
                    remap[block[t]] = len(order)
                    order.append(rep[block[t]])
                row[a] = remap[block[t]]
            rows.append(row)
        return self.make(rows, frozenset(i for i, s in enumerate(order) if s in dfa.accept))

    # -- Thompson fragments ----------------------------------------------------------

    def fragment(self, nfa: _Nfa, node: Node) -> tuple[int, int]:
        kind = node[0]
        start, end = nfa.state(), nfa.state()
        if kind == "set":
            nfa.chars[start].append((self.atoms_in(node[1]), end))
        elif kind == "eps":
            nfa.eps[start].append(end)
        elif kind == "none":
            pass
        elif kind in ("bol", "eol", "eos"):
            nfa.cond[start].append((kind, end))
        elif kind == "cat":
            cur = start
            for part in node[1:]:
                s, e = self.fragment(nfa, part)
                nfa.eps[cur].append(s)
                cur = e
            nfa.eps[cur].append(end)
        elif kind == "alt":
            for part in node[1:]:
                s, e = self.fragment(nfa, part)
                nfa.eps[start].append(s)
                nfa.eps[e].append(end)
        elif kind == "rep":
            _, sub, lo, hi = node
            cur = start
            for i in range(hi if hi is not None else lo):
                s, e = self.fragment(nfa, sub)
                nfa.eps[cur].append(s)
                if i >= lo:
                    nfa.eps[cur].append(end)
                cur = e
            if hi is None:
                s, e = self.fragment(nfa, sub)
                nfa.eps[cur].append(s)
                nfa.eps[e].append(s)
                nfa.eps[e].append(end)
            nfa.eps[cur].append(end)
        else:  # a whole language inside a regular one: embed its automaton
            dfa = self.dfa(node)
            base = [nfa.state() for _ in dfa.trans]
            nfa.eps[start].append(base[0])
            for s, row in enumerate(dfa.trans):
                for a, t in row.items():
                    nfa.chars[base[s]].append((frozenset((a,)), base[t]))
                if s in dfa.accept:
                    nfa.eps[base[s]].append(end)
        if len(nfa.eps) > MAX_NFA:
            raise TooComplex
        spend(1)
        return start, end

    def determinize(self, nfa: _Nfa, start: int, end: int, *, anchored: bool) -> Dfa:
        """Subset construction.  Configurations carry (consumed anything?, end mode): ``^`` needs
        nothing consumed; ``$`` leaves "end" (mode 2) or "one final newline" (mode 1), ``\\Z``
        only "end" (Python's reading of both)."""
        def closure(configs: Iterable[tuple[int, bool, int]]) -> frozenset[tuple[int, bool, int]]:
            seen = set(configs)
            stack = list(seen)
            while stack:
                q, used, mode = stack.pop()
                nxt = [(t, used, mode) for t in nfa.eps[q]]
                for cond, t in nfa.cond[q]:
                    if cond == "bol" and not used:
                        nxt.append((t, used, mode))
                    elif cond == "eol":
                        nxt.extend([(t, used, 1), (t, used, 2)] if mode == 0 else [(t, used, mode)])
                    elif cond == "eos" and mode != 1:
                        nxt.append((t, used, 2))
                for c in nxt:
                    if c not in seen:
                        seen.add(c)
                        stack.append(c)
            return frozenset(seen)

        first = closure([(start, False, 0)])
        index = {first: 0}
        order = [first]
        trans: list[dict[int, int]] = []
        while len(trans) < len(order):
            configs = order[len(trans)]
            moves: dict[int, set[tuple[int, bool, int]]] = {}
            for q, _used, mode in configs:
                if mode == 2:
                    continue
                for atoms, t in nfa.chars[q]:
                    for a in atoms:
                        if mode == 1 and a != self.newline:
                            continue
                        moves.setdefault(a, set()).add((t, anchored, 2 if mode == 1 else 0))
            row = {}
            spend(1 + len(moves))
            for a, targets in moves.items():
                nxt = closure(targets)
                if nxt not in index:
                    index[nxt] = len(order)
                    order.append(nxt)
                    if len(order) > MAX_STATES * 4:
                        raise TooComplex
                row[a] = index[nxt]
            trans.append(row)
        accept = frozenset(i for i, cs in enumerate(order) if any(q == end and m != 1 for q, _u, m in cs))
        return self.make(trans, accept)


class _Nfa:
    def __init__(self) -> None:
        self.eps: list[list[int]] = []
        self.chars: list[list[tuple[frozenset[int], int]]] = []
        self.cond: list[list[tuple[str, int]]] = []

    def state(self) -> int:
        self.eps.append([])
        self.chars.append([])
        self.cond.append([])
        return len(self.eps) - 1
