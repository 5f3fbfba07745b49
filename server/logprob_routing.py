"""Token logprobs: which answer event carries which token, and OpenAI's entry shape.

The engine hands each text delta the entries of the tokens whose last visible character it
shows (:mod:`afm_struct.decoding.logprobs`).  The routers then turn text into answer events
(text, reasoning, tool-call opening and arguments) and may hold text back (a partial tag) or
swallow markup (thinking tags, a tool format's call frame).  :class:`LogprobRouting` follows
them:

* a token's entry goes on the event whose text contains the token's text — text, or a call's
  arguments (OpenAI sends those in chat's ``logprobs.content`` too); the tokens of a call's
  markup (``<tool_call>``, the name) go on the event that opens the call;
* while a router holds text back, its tokens wait for the event that shows it;
* reasoning is not reported (OpenAI does not expose reasoning tokens): tokens shown only in
  reasoning are dropped, and so are tokens the router swallowed (thinking tags, whitespace
  after the block, call markup after the arguments).

Pure functions and a small state machine: no I/O, no MLX, no protocol shapes but OpenAI's
entry (:func:`entry_dict`), which both OpenAI protocols use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from afm_struct.turn.events import AnswerEvent, CallArguments, CallOpened, Reasoning, Text
from afm_struct.turn.outputs import TokenLogprob, TopLogprob

Entries = list[TokenLogprob]


class LogprobRouting:
    """Assigns token entries to the answer events the router made of the generated text.

    The waiting entries cover a stretch of the generated text; an event's text is found in that
    stretch, the entries overlapping it go on the event, those before it were swallowed
    (tags, call markup, whitespace after a thinking block: dropped) and those after it were
    held back by the router (they wait for its next event).
    """

    def __init__(self) -> None:
        self._text = ""  # the generation's text so far (entries' offsets index it)
        self._waiting: Entries = []

    def assign(self, text: str, events: Sequence[AnswerEvent], entries: Entries | None,
               ) -> list[Entries | None]:
        """One slot per event made of ``text`` (and held text): the entries it carries, or None
        (reasoning, a call's closing)."""
        self._text += text
        if entries:
            self._waiting.extend(entries)
        slots: list[Entries | None] = [None] * len(events)
        for i, ev in enumerate(events):
            if isinstance(ev, Reasoning):
                self._take(ev.text)  # not reported
            elif isinstance(ev, Text):
                slots[i] = self._take(ev.text)
            elif isinstance(ev, CallOpened):
                # The call's name comes from markup tokens that all belong to its opening.
                slots[i] = self._take(None)
            elif isinstance(ev, CallArguments):
                slots[i] = self._take(ev.text)
        return slots

    def _take(self, shown: str | None) -> Entries:
        waiting = self._waiting
        if not waiting:
            return []
        lo = waiting[0].offset
        stretch = self._text[lo:max(e.end for e in waiting)]
        if shown is None or not shown:
            at = -1 if shown is None else len(stretch)
        elif stretch.endswith(shown):
            at = len(stretch) - len(shown)
        else:
            at = stretch.rfind(shown)
        if at < 0:  # not found as is (or a call's start): everything waiting goes here
            self._waiting = []
            return waiting
        start, stop = lo + at, lo + at + len(shown)
        self._waiting = [e for e in waiting if e.offset >= stop and e.end > stop]
        return [e for e in waiting if e.end > start and e.offset < stop]


def within(entries: Entries, raw: str, kept: str) -> Entries:
    """The entries of deferred content that overlap ``kept``, the sanitized part of ``raw``.

    Deferred (best-effort) content is sanitized as a whole: fences and prose around the JSON
    are cut.  ``kept`` is then a substring of ``raw``; the entries' offsets are in the
    generation's text, where ``raw`` begins at the first entry's offset.
    """
    if not entries or kept == raw:
        return entries
    at = raw.find(kept)
    if at < 0:
        return entries
    base = entries[0].offset
    lo, hi = base + at, base + at + len(kept)
    return [e for e in entries if e.offset < hi and e.end > lo]


def top_dict(alt: TopLogprob) -> dict[str, Any]:
    """One ``top_logprobs`` item: ``{"token", "logprob", "bytes"}``."""
    return {"token": alt.token, "logprob": alt.logprob, "bytes": list(alt.bytes)}


def entry_dict(entry: TokenLogprob) -> dict[str, Any]:
    """One ``logprobs.content`` item in OpenAI's shape."""
    return {"token": entry.token, "logprob": entry.logprob, "bytes": list(entry.bytes),
            "top_logprobs": [top_dict(t) for t in entry.top]}


def logprobs_object(entries: Entries) -> dict[str, Any]:
    """``choices[].logprobs``: the content entries, and ``refusal: null`` (no refusals here)."""
    return {"content": [entry_dict(e) for e in entries], "refusal": None}
