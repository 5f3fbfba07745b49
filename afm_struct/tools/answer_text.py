"""Text outside calls, for the call parsers: whitespace next to a call is layout, not content."""

from __future__ import annotations

from .parser import ParseEvent, TextEvent
from .scanner import WS


class AnswerText:
    """Emits the answer's text: whitespace after a call is dropped, whitespace before one is
    held back until text follows (so a turn that is only calls has no content)."""

    def __init__(self) -> None:
        self.pending = ""  # trailing whitespace not given out yet
        self.after_call = False
        self.seen = False  # any non-blank text so far

    def add(self, out: list[ParseEvent], text: str) -> None:
        """Emit ``text`` (held whitespace goes out in front of the next text)."""
        if self.after_call:
            text = text.lstrip(WS)
            if not text:
                return
            self.after_call = False
        body = text.rstrip(WS)
        if not body:
            self.pending += text
            return
        self.seen = True
        out.append(TextEvent(self.pending + body))
        self.pending = text[len(body):]

    def call_starts(self) -> None:
        """A call opens: whitespace held before it was layout."""
        self.pending = ""

    def call_ends(self) -> None:
        """A call closed: whitespace right after it is layout."""
        self.after_call = True

    def cut_opener(self, held: str) -> str:
        """What goes out of ``held``, the start of a call opener the end of generation cut:
        nothing after a call (only calls may follow one) or from two characters on ("<tool":
        call markup); a lone "<" or "[" in text is as likely text."""
        return held if len(held) < 2 and not self.after_call else ""

    def finish(self, out: list[ParseEvent], *, calls: int) -> None:
        """The end: held whitespace is content only in a turn without calls."""
        if self.pending and not calls:
            out.append(TextEvent(self.pending))
        self.pending = ""
