"""Partial values while streaming: the JSON value parsed so far of each growing JSON text.

A request that asks for them (chat's ``stream_options.include_partial``, an AFM extension) gets,
on each content event of a JSON answer and on each tool-argument event, the value its text so
far parses to (:class:`~afm_struct.turn.events.Partial`).  It is computed here, once per event,
in the protocol-neutral layer (``server/run.py`` calls :meth:`PartialValues.attach`); each
protocol's encoder only writes it.

Parsing is jiter's partial mode (pydantic's JSON parser, ``partial_mode="trailing-strings"``):
an unfinished string is kept as far as written, an unfinished key, number or literal is left
out (``{"a": 1.`` → ``{}``).  A text that parses to nothing yet (leading whitespace, the first
letters of a top-level ``true``) gets no partial; one that stops parsing (text after the JSON
value, which a grammar-constrained answer never has) keeps its last partial.  Each event parses
the whole text again, O(n²) in the answer's length: a parse took 0.1 ms at 1 KB, 0.26 ms at
10 KB and 4.6 ms at 100 KB (jiter 0.19, this project's 2-core dev machine under load), so a
100 KB answer of ~30k events spends over a minute parsing: opt-in, for answers of a few KB.
"""

from __future__ import annotations

from typing import Any

import jiter

from ..turn.events import AnswerEvent, CallArguments, CallOpened, Partial, Text


def parse_partial(text: str) -> Partial | None:
    """The value ``text`` (a prefix of a JSON text) parses to so far, or None when no prefix
    of it is a value yet."""
    try:
        value: Any = jiter.from_json(text.encode(), partial_mode="trailing-strings")
    except ValueError:
        return None
    return Partial(value)


class PartialJson:
    """One growing JSON text and its last partial value."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._last: Partial | None = None

    def feed(self, text: str) -> Partial | None:
        """The partial value once ``text`` is appended (the last one when it no longer parses)."""
        if text:
            self._parts.append(text)
            found = parse_partial("".join(self._parts))
            if found is not None:
                self._last = found
        return self._last


class PartialValues:
    """The partial values of one run: the content answer's (when it is JSON) and each tool
    call's arguments, by call index."""

    def __init__(self, *, json_content: bool) -> None:
        self.json_content = json_content
        self._content = PartialJson()
        self._calls: dict[int, PartialJson] = {}

    def attach(self, event: AnswerEvent) -> None:
        """Set ``event.partial`` for a content event of a JSON answer or a call-argument event
        (other events are left as they are)."""
        if isinstance(event, Text):
            if self.json_content:
                event.partial = self._content.feed(event.text)
        elif isinstance(event, CallOpened):
            event.partial = self._calls.setdefault(event.index, PartialJson()).feed(event.arguments)
        elif isinstance(event, CallArguments):
            event.partial = self._calls.setdefault(event.index, PartialJson()).feed(event.text)
