"""Thinking blocks split off generated text: the one rule, for the content and tool routers.

Text between the open and close tags (``<think>…</think>`` or the model's own) is reasoning; the
tags are removed; whitespace right after a closed block is the template's, not the answer's, and
is dropped; the block may have been opened by the prompt (``start_in_reasoning``); a partial tag
held back at the end is ordinary text; a tag that opens or closes nothing is dropped.
"""

from __future__ import annotations

from .markers import Marker, MarkerScanner

REASONING = "reasoning"
ANSWER = "answer"


class ReasoningSplitter:
    """Splits ``open…close`` thinking blocks off the text; the rest is the answer.

    ``tags=None``: no thinking blocks, everything is the answer.
    """

    def __init__(self, tags: tuple[str, str] | None, *, start_in_reasoning: bool = False) -> None:
        self.tags = tags
        self.inside = bool(tags) and start_in_reasoning
        self._after = False  # just after a block: leading whitespace is dropped
        self._scan = MarkerScanner(self._looking_for())

    def feed(self, text: str, *, final: bool = False) -> list[tuple[str, str]]:
        """``(channel, text)`` pieces: channel is ``reasoning`` or ``answer``.  ``final``: the end
        of the text (a held partial tag is given out as text)."""
        if self.tags is None:
            return [(ANSWER, text)] if text else []
        out: list[tuple[str, str]] = []
        for piece in self._scan.feed(text, final=final):
            if isinstance(piece, Marker):
                # Tags are structure, never text: an open tag inside the block and a close tag
                # outside it (a model repeating itself) are dropped.
                if piece.text == self.tags[1 if self.inside else 0]:
                    self._after = self.inside
                    self.inside = not self.inside
            else:
                self._put(out, piece)
        return out

    def _looking_for(self) -> tuple[str, ...]:
        return self.tags or ()

    def _put(self, out: list[tuple[str, str]], text: str) -> None:
        if not self.inside and self._after:
            text = text.lstrip()
            if not text:
                return
            self._after = False
        if text:
            out.append((REASONING if self.inside else ANSWER, text))
