"""One text state machine for markers in streamed text: stop strings, thinking tags, call openers.

A :class:`MarkerScanner` is given text as it is generated and yields, in order, literal text
(``str``) and the active markers it finds (:class:`Marker`).  It holds back exactly the longest
suffix that could still begin a marker, and releases it as text when fed with ``final=True``, or
hands it over with :meth:`MarkerScanner.take`.

The rule is leftmost-shortest: the match that starts first wins (the shortest one when several
start at the same place), and a match is not given out while an earlier-starting marker could
still complete.  So the pieces do not depend on how the text was split into chunks, and held
text is never longer than the longest active marker minus one.

The consumer may change :attr:`MarkerScanner.markers` between the pieces it takes (a reasoning
splitter looks for the open tag, then the close tag); the rest is scanned against the new table.
Pieces are produced lazily: if the consumer stops iterating, the text not yet given out stays in
the scanner (see :meth:`~MarkerScanner.take`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Marker:
    """A marker found in the text (``text`` is the marker as written in the table)."""

    text: str


class MarkerScanner:
    """Streams text against a table of markers; see the module docstring."""

    __slots__ = ("_buf", "_longest", "_markers")

    def __init__(self, markers: Iterable[str] = ()) -> None:
        self._buf = ""
        self.markers = tuple(markers)

    @property
    def markers(self) -> tuple[str, ...]:
        """The active markers (non-empty strings)."""
        return self._markers

    @markers.setter
    def markers(self, markers: Iterable[str]) -> None:
        table = tuple(markers)
        if not all(table):
            raise ValueError("a marker must not be empty")
        self._markers = table
        self._longest = max(map(len, table), default=0)

    @property
    def held(self) -> str:
        """The text not given out yet (after a full iteration: the held-back possible marker)."""
        return self._buf

    def fork(self) -> MarkerScanner:
        """An independent copy: the same table and held text."""
        twin = MarkerScanner(self._markers)
        twin._buf = self._buf
        return twin

    def take(self) -> str:
        """Remove and return the text not given out yet, unscanned."""
        out, self._buf = self._buf, ""
        return out

    def feed(self, text: str, *, final: bool = False) -> Iterator[str | Marker]:
        """Add ``text``; the pieces now available: literal text and markers, in order.

        Without ``final``, a suffix that could still begin a marker is held back for the next
        call; with it, everything is given out (a held partial marker is ordinary text).  The
        text is added at once; the pieces are scanned as the iterator is consumed.
        """
        self._buf += text
        return self._pieces(final)

    def _pieces(self, final: bool) -> Iterator[str | Marker]:
        while self._buf:
            at, marker = self._next(final)
            if at:
                piece, self._buf = self._buf[:at], self._buf[at:]
                yield piece
            elif marker is None:
                return  # all of it could still begin a marker
            else:
                self._buf = self._buf[len(marker):]
                yield Marker(marker)

    def _next(self, final: bool) -> tuple[int, str | None]:
        """Where the next piece ends: ``(start, marker)`` of the match to give out, or
        ``(end of the literal text, None)``."""
        buf, markers = self._buf, self._markers
        if not markers:
            return len(buf), None
        at, found = len(buf), None
        for m in markers:
            i = buf.find(m, 0, at + len(m))  # only matches starting no later than the best
            if i >= 0 and (i < at or (i == at and found is not None and len(m) < len(found))):
                at, found = i, m
        if not final:
            hold = len(buf) - self._partial_suffix(buf)
            if hold < at:  # an earlier marker may still complete: wait for it
                return hold, None
        return at, found

    def _partial_suffix(self, buf: str) -> int:
        """Length of the longest suffix of ``buf`` that is a proper prefix of an active marker."""
        best = 0
        for m in self._markers:
            for n in range(min(len(m) - 1, len(buf)), best, -1):
                if buf.endswith(m[:n]):
                    best = n
                    break
        return best
