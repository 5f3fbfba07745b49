"""A minimal automaton written back as a regex that Python's ``re`` and llguidance's Rust
regex read alike: ``(?:…)``, ``|``, ``*``, ``?`` and classes of ``\\uXXXX`` escapes, no ``\\w`` /
``\\s`` (they mean other sets in the two engines), never ``$`` inside.
"""

from __future__ import annotations

import functools
from typing import Any

from .automata import MAX_STATES, Dfa, Node, TooComplex, spend
from .charsets import FULL, NEWLINE, SURROGATES, complement, diff, normalize, within

MAX_PATTERN = 32000


def to_regex(dfa: Dfa) -> str | None:
    """State elimination; labels are small regex trees so unions of classes stay one class."""
    if not dfa.accept:
        return None
    if len(dfa.trans) > MAX_STATES:
        raise TooComplex
    n = len(dfa.trans)
    start, final = n, n + 1
    edges: dict[tuple[int, int], Node] = {}
    weight: dict[tuple[int, int], int] = {}  # about how many characters an edge prints to
    succs: dict[int, set[int]] = {q: set() for q in range(n + 2)}
    preds: dict[int, set[int]] = {q: set() for q in range(n + 2)}

    def put(p: int, r: int, label: Node, w: int) -> None:
        if (p, r) in edges:
            edges[(p, r)] = _alt(edges[(p, r)], label)
            weight[(p, r)] += w + 1
        else:
            edges[(p, r)], weight[(p, r)] = label, w
        if weight[(p, r)] > MAX_PATTERN:
            raise TooComplex
        succs[p].add(r)
        preds[r].add(p)

    put(start, 0, ("eps",), 0)
    for s, row in enumerate(dfa.trans):
        by_target: dict[int, list[tuple[int, int]]] = {}
        for a, t in row.items():
            by_target.setdefault(t, []).extend(dfa.atoms[a])
        for t, ivs in by_target.items():
            if diff(normalize(ivs), SURROGATES):  # lone surrogates only: no scalar value takes it
                put(s, t, ("set", normalize(ivs)), _class_width(normalize(ivs)))
        if s in dfa.accept:
            put(s, final, ("eps",), 0)
    remaining = set(range(n))
    work = 0
    while remaining:
        q = min(remaining, key=lambda x: (len(preds[x] - {x}) * len(succs[x] - {x}), x))
        remaining.discard(q)
        loop = edges.pop((q, q), None)
        loop_w = weight.pop((q, q), 0) + 4
        ins = [(p, edges.pop((p, q)), weight.pop((p, q))) for p in preds[q] if p != q]
        outs = [(r, edges.pop((q, r)), weight.pop((q, r))) for r in succs[q] if r != q]
        for p, _, _ in ins:
            succs[p].discard(q)
        for r, _, _ in outs:
            preds[r].discard(q)
        mid = ("star", loop) if loop is not None else None
        for p, a, wa in ins:
            for r, b, wb in outs:
                put(p, r, _cat(a, mid, b), wa + wb + (loop_w if mid else 0))
                work += 1
        spend(1 + len(ins) * len(outs))
        if work > 20 * MAX_STATES:
            raise TooComplex
    label = edges.get((start, final))
    if label is None:
        return None
    text = _print(label, 0)
    if len(text) > MAX_PATTERN:
        raise TooComplex
    return text


def _cat(*parts: Node | None) -> Node:
    items: list[Node] = []
    for p in parts:
        if p is None or p[0] == "eps":
            continue
        items.extend(p[1:] if p[0] == "cat" else [p])
    return ("eps",) if not items else items[0] if len(items) == 1 else ("cat", *items)


def _alt(a: Node, b: Node) -> Node:
    items: list[Node] = []
    for p in (a, b):
        items.extend(p[1:] if p[0] == "alt" else [p])
    sets = [p for p in items if p[0] == "set"]
    rest = [p for p in items if p[0] != "set"]
    if len(sets) > 1:
        rest.insert(0, ("set", normalize(iv for s in sets for iv in s[1])))
    elif sets:
        rest.insert(0, sets[0])
    unique = list(dict.fromkeys(rest))
    return unique[0] if len(unique) == 1 else ("alt", *unique)


def _char(cp: int) -> str:
    c = chr(cp)
    if (c.isascii() and c.isalnum()) or (cp >= 0xA0 and c.isprintable() and not c.isspace()):
        # Non-ASCII letters, digits, marks and symbols as themselves: one character where an
        # escape takes six (Unicode classes such as Python's \\d or \\w print 5x shorter), and
        # no ASCII punctuation, which Rust's classes read as set operators (``&&``, ``--``).
        return c
    return f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"


def _class_width(intervals: tuple[tuple[int, int], ...]) -> int:
    """How many characters the class prints to (what an edge adds to the pattern's length)."""
    return len(_class(intervals))


@functools.lru_cache(maxsize=4096)
def _class(intervals: tuple[tuple[int, int], ...]) -> str:
    if intervals == FULL:
        return "[\\s\\S]"
    if diff(intervals, SURROGATES) == diff(FULL, NEWLINE + SURROGATES):
        return "."
    if (intervals and intervals[0][0] == 0 and intervals != ((0, 0),)
            and not (within(0x5C, intervals) and within(0x22, intervals))):
        intervals = diff(intervals, ((0, 0),))  # see json_escapes: U+0000 beside a missing \ or "
    usable = diff(intervals, SURROGATES)
    if len(usable) == 1 and usable[0][0] == usable[0][1]:
        return _char(usable[0][0])
    plain, neg = _class_body(intervals), _class_body(complement(intervals))
    return f"[^{neg}]" if len(neg) < len(plain) else f"[{plain}]"


def _class_body(intervals: tuple[tuple[int, int], ...]) -> str:
    # Every member spelled out: ``\\w`` and ``\\s`` mean other sets to Rust's regex than to
    # Python's (marks, numerics, separators), and the output must mean one thing.
    return "".join(_char(lo) if lo == hi else f"{_char(lo)}-{_char(hi)}"
                   for lo, hi in diff(intervals, SURROGATES))


def _print(node: Node, prec: int) -> str:
    """prec: 0 = alternation allowed, 1 = inside a concatenation, 2 = under a star."""
    kind = node[0]
    if kind == "set":
        return _class(node[1])
    if kind == "eps":
        return "(?:)"
    if kind == "star":
        inner = node[1]
        while inner[0] == "star":  # (x*)* = x*
            inner = inner[1]
        if inner[0] == "alt" and any(c[0] == "eps" for c in inner[1:]):  # (x|)* = x*
            rest = [c for c in inner[1:] if c[0] != "eps"]
            if not rest:
                return "(?:)"
            inner = rest[0] if len(rest) == 1 else ("alt", *rest)
        return _print(inner, 2) + "*"
    if kind == "cat":
        text = "".join(_print(c, 1) for c in node[1:])
        return f"(?:{text})" if prec >= 2 else text
    # alt: an empty branch becomes "?"
    branches = [c for c in node[1:] if c[0] != "eps"]
    optional = len(branches) < len(node) - 1
    text = "|".join(_print(c, 0) for c in branches)
    if optional:
        if len(branches) == 1 and branches[0][0] == "star":  # x* already takes the empty string
            return _print(branches[0], prec)
        single = len(branches) == 1 and branches[0][0] == "set"
        return (text if single else f"(?:{text})") + "?"
    return f"(?:{text})" if prec >= 1 else text


def other_strings(words: list[str]) -> str | None:
    """An anchored regex for every string that is none of ``words``, read off their trie: a
    string leaves the trie at some character, stops at a node no word ends at, or goes on past
    a word.  Linear in the words' length, where the complement automaton's state elimination
    blows up (a few enum values already pass :data:`MAX_PATTERN` that way); None past it."""
    trie: dict[str, Any] = {}
    for word in words:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}  # a word ends here

    def tree(node: dict[str, Any]) -> Node:
        branches: list[Node] = [] if "" in node else [("eps",)]
        chars = sorted(c for c in node if c)
        leave = complement(normalize((ord(c), ord(c)) for c in chars))
        branches.append(("cat", ("set", leave), ("star", ("set", FULL))))
        branches.extend(_cat(("set", ((ord(c), ord(c)),)), tree(node[c])) for c in chars)
        return branches[0] if len(branches) == 1 else ("alt", *branches)

    text = _print(tree(trie), 0)
    return None if len(text) > MAX_PATTERN else f"^(?:{text})$"
