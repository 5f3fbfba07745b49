"""Stop sequences matched across token boundaries, never emitted."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from ..turn.markers import Marker, MarkerScanner


class StopMatcher:
    """Hold back text that could still become a stop sequence; cut at the first match.

    The stops are the markers of a :class:`~afm_struct.turn.markers.MarkerScanner`: the match
    that starts first in the text wins, whatever the tokens were.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = tuple(s for s in stops if s)
        self._scan = MarkerScanner(self.stops)
        self.stopped = False
        # The stop sequence that matched (Anthropic's ``stop_sequence`` names it).
        self.matched: str | None = None

    @property
    def held(self) -> str:
        """The text held back because it may still begin a stop sequence."""
        return self._scan.held

    def feed(self, text: str) -> str:
        """Add generated text; return what is safe to emit.  Sets :attr:`stopped` on a match."""
        if not self.stops:
            return text
        return self._cut(self._scan.feed(text))

    def flush(self) -> str:
        """Release the held text (generation ended, or stops no longer apply, before a stop
        sequence completed).  A stop the held text still contains cuts it as in :meth:`feed`."""
        return self._cut(self._scan.feed("", final=True))

    def _cut(self, pieces: Iterator[str | Marker]) -> str:
        out = ""
        for piece in pieces:
            if isinstance(piece, Marker):
                self.stopped = True
                self.matched = piece.text
                self._scan.take()  # the stop and what follows are never emitted
                break
            out += piece
        return out
