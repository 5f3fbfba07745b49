"""Regular languages of Unicode strings: complement, intersection, emptiness, and back to a regex.

The rewrites need what no regex engine offers: the strings a ``pattern`` does *not* match (for
``not``, ``oneOf``, ``propertyNames``), the keys two ``patternProperties`` share, or a proof that
two patterns never match the same string.  A :class:`Lang` is an expression over languages
(patterns read as ``re.search`` reads them, literal sets, length ranges, and their unions,
intersections and complements); :meth:`Lang.dfa` turns it into a minimal deterministic automaton
over an alphabet of character classes, and :meth:`Lang.to_pattern` writes that automaton back as
an anchored regex both Python's ``re`` and llguidance's Rust regex read alike (``(?:…)``, ``|``,
``*``, classes of ``\\uXXXX`` escapes; never ``$`` inside).  Every step is bounded: past
:data:`MAX_STATES` automaton states or :data:`MAX_PATTERN` characters of output the answer is
None ("cannot say"), never a guess.

The anchored output ``^(?:R)$`` is exact as the engine reads it (``$`` is the end of the text).
Python's ``$`` also matches before a final newline, so jsonschema reading a rewritten schema
can differ from the engine on strings that end in ``\\n``; the original schema is what outputs
are validated against.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .automata import Builder, Dfa, Node, TooComplex, budget
from .charsets import FULL, complement, normalize
from .writer import to_regex

__all__ = ["ANYTHING", "FULL", "Dfa", "Lang", "Node", "TooComplex", "budget", "chars", "complement",
           "length", "literal", "normalize", "one_of"]


@dataclass(frozen=True)
class Lang:
    """A regular language as an expression; build with the functions below and ``& | ~``."""

    node: Node

    def __and__(self, other: Lang) -> Lang:
        return Lang(("and", self.node, other.node))

    def __or__(self, other: Lang) -> Lang:
        return Lang(("alt", self.node, other.node))

    def __invert__(self) -> Lang:
        return Lang(("not", self.node))

    def dfa(self) -> Dfa:
        """The minimal automaton (raises :class:`TooComplex` past the bounds)."""
        return Builder(self.node).build()

    def is_empty(self) -> bool | None:
        """True when no string is in the language; None when too complex to tell."""
        try:
            return not self.dfa().accept
        except TooComplex:
            return None

    def to_pattern(self) -> str | None:
        """An anchored regex for exactly this language (as the engine reads it), or None."""
        try:
            body = to_regex(self.dfa())
        except TooComplex:
            return None
        return None if body is None else f"^(?:{body})$"


def chars(intervals: Iterable[tuple[int, int]]) -> Lang:
    """One character from a set."""
    return Lang(("set", normalize(intervals)))


def literal(text: str) -> Lang:
    """Exactly ``text``."""
    return Lang(("cat", *(("set", ((ord(c), ord(c)),)) for c in text))) if text else Lang(("eps",))


def one_of(texts: Iterable[str]) -> Lang:
    """Exactly one of ``texts`` (empty: nothing)."""
    nodes = [literal(t).node for t in dict.fromkeys(texts)]
    return Lang(("alt", *nodes)) if nodes else Lang(("none",))


def length(lo: int, hi: int | None) -> Lang:
    """Any string of ``lo`` to ``hi`` (None: unbounded) code points."""
    return Lang(("rep", ("set", FULL), lo, hi))


ANYTHING = length(0, None)
