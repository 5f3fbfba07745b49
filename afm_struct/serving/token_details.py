"""Token details: the per-token view of a run (the playground's, and any script's).

A request that asks for them (chat's ``stream_options.include_token_details`` or the
``X-AFM-Token-Details`` header, an AFM extension) gets, on each answer event, one record per
token its text shows: the token's text, its logprob and top alternatives, whether the grammar
forced it (not sampled: a forced run or budget closing), the constraint pressure of its step
(the mass the mask removed: ``afm_struct/decoding/constraint_pressure.py``) and the field it
belongs to (the JSON path of the value its text ends in: :mod:`.json_path_scan`).  At the end,
the sums per field.  Computed here once, protocol-neutral (``server/run.py`` calls
:meth:`TokenDetails.attach`); each protocol's encoder only writes the dicts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..turn.events import AnswerEvent, CallArguments, CallOpened, Text
from ..turn.outputs import TokenLogprob
from .json_path_scan import JsonPathScanner

# Alternatives per token when the request did not ask for logprobs itself (with logprobs,
# its own ``top_logprobs``).
DETAIL_TOP = 5


@dataclass
class FieldSums:
    """What the tokens of one field add up to."""

    tokens: int = 0
    forced: int = 0
    logprob: float = 0.0
    pressure: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """The wire's ``{tokens, forced, logprob, pressure, mean_pressure}``."""
        sampled = self.tokens - self.forced
        return {"tokens": self.tokens, "forced": self.forced, "logprob": round(self.logprob, 6),
                "pressure": round(self.pressure, 6),
                "mean_pressure": round(self.pressure / sampled, 6) if sampled else 0.0}


class TokenDetails:
    """The token details of one run: each channel's JSON position and the per-field sums.

    ``json_content``: the content answer is JSON (its tokens get field paths; otherwise all
    content is the root ``$``).  A call's arguments are scanned as JSON, under
    ``tool_calls[i]``."""

    def __init__(self, *, json_content: bool) -> None:
        self.json_content = json_content
        self._scanners: dict[str, JsonPathScanner] = {}
        self._fields: dict[str, FieldSums] = {}
        # The content answer's text and token entries (its per-field confidence, at the end).
        self.content_text: list[str] = []
        self.content_entries: list[TokenLogprob] = []

    def attach(self, event: AnswerEvent) -> None:
        """Set ``event.details`` (content and call events that carry token entries)."""
        if isinstance(event, Text):
            prefix = "" if self.json_content else None
            self.content_text.append(event.text)
            self.content_entries.extend(event.logprobs or [])
            event.details = self._records(prefix, event.text, event.logprobs or [])
        elif isinstance(event, CallOpened | CallArguments):
            text = event.arguments if isinstance(event, CallOpened) else event.text
            event.details = self._records(f"tool_calls[{event.index}]", text, event.logprobs or [])

    def _records(self, channel: str | None, text: str, entries: list[TokenLogprob]) -> list[dict[str, Any]]:
        """One record per entry.  Each token's characters are its span in the output (tokens
        of one multi-byte character share a span: counted once); the event's text is the last
        of them, what comes first being markup its event does not show (a call's opening)."""
        scanner = self._scanners.setdefault(channel or "content", JsonPathScanner())
        lengths, last = [], None
        for e in entries:
            lengths.append(0 if (e.offset, e.end) == last else e.end - e.offset)
            last = (e.offset, e.end)
        at = len(text) - sum(lengths)  # negative: that many characters of markup first
        if channel is not None and at > 0:
            scanner.feed(text[:at])  # text no entry here shows (none expected)
        out = []
        for e, n in zip(entries, lengths, strict=True):
            piece = text[max(at, 0):max(at + n, 0)]
            at += n
            if channel is not None:
                scanner.feed(piece)
                path = scanner.path
                if channel:
                    path = channel + path[1:]
            else:
                path = "$"
            out.append(_record(e, path))
            sums = self._fields.setdefault(path, FieldSums())
            sums.tokens += 1
            sums.forced += 0 if e.sampled else 1
            sums.logprob += e.logprob
            sums.pressure += e.pressure or 0.0
        return out

    def fields(self) -> dict[str, dict[str, Any]]:
        """The per-field sums, by path, in the order fields first appeared."""
        return {path: sums.as_dict() for path, sums in self._fields.items()}


def _record(e: TokenLogprob, path: str) -> dict[str, Any]:
    return {"token": e.token, "id": e.id, "logprob": e.logprob,
            "top": [{"token": t.token, "id": t.id, "logprob": t.logprob} for t in e.top],
            "forced": not e.sampled, "pressure": e.pressure, "field": path}
