"""Where request text lands in a rendered chat prompt, so that it is tokenized as plain text.

A chat template writes its own special tokens (``<|im_start|>``, ``[INST]``, ``<|eot_id|>``) around
text that came from the request.  Tokenized whole, the rendered prompt turns a special token's
string typed by a user into the real token, and anyone can forge a turn.  So the chat inputs are
also rendered *marked*: private-use markers carrying a random per-render nonce (which no request
can guess, so none can forge a marker) are put into every string that came from the request:

* free text (content, text parts, names, descriptions, call names, argument strings) is delimited
  whole, ``lead + OPEN + core + CLOSE + trail``: surrounding whitespace stays outside, so a
  template's ``trim`` trims the same text;
* in every string, dict keys, roles, ids, schemas and template variables included, each special
  token's string is wrapped, and so is a piece of one at either end of the string (``…<|im_`` /
  ``end|>…``), which a template joining two strings could complete.

:meth:`TextMarker.locate` takes the markers out of the marked rendering again and reports the user
spans (between the two markers of a pair) and the cut points (every marker: text on either side
of one was never adjacent in a request string, so no special token may straddle it).  A template
can split, strip or JSON-escape marked text; a lone marker left by a split still cuts.  The caller
trusts the spans only when the marked rendering, markers removed, equals the plain one.
"""

from __future__ import annotations

import bisect
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_FRAME_OPEN, _FRAME_CLOSE = "\ue000", "\ue001"
_OPEN, _CLOSE, _WRAP_OPEN, _WRAP_CLOSE = "\ue002", "\ue003", "\ue004", "\ue005"
_PAIRS = {_CLOSE: _OPEN, _WRAP_CLOSE: _WRAP_OPEN}
# Fields of a message, a call or a tool that hold free text (delimited whole when delimiting).
_TEXT_FIELDS = frozenset({"content", "name", "reasoning_content", "reasoning", "thinking", "text",
                          "description", "arguments"})


@dataclass(frozen=True)
class SpecialTokens:
    """The special tokens of a vocabulary: what request text must never be tokenized into."""

    ids: frozenset[int]
    pattern: re.Pattern[str] | None  # any special token's string, longest first
    prefixes: frozenset[str]  # proper prefixes of those strings (a piece at a string's end)
    suffixes: frozenset[str]  # proper suffixes (a piece at a string's start)
    longest: int

    @classmethod
    def of(cls, added: Mapping[int, Any]) -> SpecialTokens:
        """From a ``tokenizers`` added-token table (``{id: AddedToken}``).

        Only tokens flagged special count, as in Hugging Face's ``split_special_tokens``; a
        whitespace-only token (a few vocabularies have them) is left out: marking every run of
        spaces in a request would break templates that trim.
        """
        strings = {tok.content: i for i, tok in added.items()
                   if tok.special and tok.content and not tok.content.isspace()}
        if not strings:
            return cls(frozenset(), None, frozenset(), frozenset(), 0)
        ordered = sorted(strings, key=len, reverse=True)
        # A look-ahead on the first characters keeps the scan of long texts fast: most positions
        # fail it at once instead of trying every alternative.
        first = "".join(sorted({re.escape(s[0]) for s in ordered}))
        pattern = re.compile(f"(?=[{first}])(?:{'|'.join(map(re.escape, ordered))})")
        prefixes = frozenset(s[:k] for s in strings for k in range(1, len(s)))
        suffixes = frozenset(s[k:] for s in strings for k in range(1, len(s)))
        return cls(frozenset(strings.values()), pattern, prefixes, suffixes, len(ordered[0]))


@dataclass(frozen=True)
class Located:
    """A marked rendering with its markers taken out."""

    text: str
    spans: tuple[tuple[int, int], ...]  # user text, merged and sorted
    cuts: tuple[int, ...]  # sorted positions where a marker stood

    def touches(self, start: int, end: int) -> bool:
        """True when ``[start, end)`` overlaps a user span or strictly contains a cut point."""
        i = bisect.bisect_right(self.spans, (start, float("inf"))) - 1
        if i >= 0 and self.spans[i][1] > start:
            return True
        if i + 1 < len(self.spans) and self.spans[i + 1][0] < end:
            return True
        j = bisect.bisect_right(self.cuts, start)
        return j < len(self.cuts) and self.cuts[j] < end


class TextMarker:
    """Marks the request strings of one rendering (``delimit``: free text delimited whole too)."""

    def __init__(self, specials: SpecialTokens, *, delimit: bool) -> None:
        self.specials = specials
        self.delimit = delimit
        self.marks = 0  # markers put in so far
        self._nonce = "".join(chr(0xE100 + secrets.randbelow(0x100)) for _ in range(6))
        self._found = re.compile(re.escape(_FRAME_OPEN + self._nonce) + r"([\ue002-\ue005])(\d+)"
                                 + re.escape(_FRAME_CLOSE))

    def _marker(self, kind: str, index: int) -> str:
        return f"{_FRAME_OPEN}{self._nonce}{kind}{index}{_FRAME_CLOSE}"

    def _regions(self, s: str) -> list[tuple[int, int]]:
        """Special-token strings in ``s`` and pieces of one at its ends (trimmed or not)."""
        sp = self.specials
        if sp.pattern is None:
            return []
        found = [(m.start(), m.end()) for m in sp.pattern.finditer(s)]
        core_start, core_end = len(s) - len(s.lstrip()), len(s.rstrip())
        for start in {0, core_start}:
            for k in range(min(sp.longest - 1, len(s) - start), 0, -1):
                if s[start:start + k] in sp.suffixes:
                    found.append((start, start + k))
                    break
        for end in {len(s), core_end}:
            for k in range(min(sp.longest - 1, end), 0, -1):
                if s[end - k:end] in sp.prefixes:
                    found.append((end - k, end))
                    break
        merged: list[tuple[int, int]] = []
        for a, b in sorted(found):
            if merged and a < merged[-1][1]:
                merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
            else:
                merged.append((a, b))
        return merged

    def _wrap(self, s: str) -> str:
        parts, last = [], 0
        for a, b in self._regions(s):
            self.marks += 1
            parts += [s[last:a], self._marker(_WRAP_OPEN, self.marks), s[a:b],
                      self._marker(_WRAP_CLOSE, self.marks)]
            last = b
        if not parts:
            return s
        parts.append(s[last:])
        return "".join(parts)

    def text(self, s: Any) -> Any:
        """A free-text field: delimited whole (when delimiting) and its special strings wrapped."""
        if not isinstance(s, str):
            return self.value(s)
        core = s.strip()
        if not self.delimit or not core:
            return self._wrap(s)
        lead, trail = s[:len(s) - len(s.lstrip())], s[len(s.rstrip()):]
        self.marks += 1
        return (lead + self._marker(_OPEN, self.marks) + self._wrap(core)
                + self._marker(_CLOSE, self.marks) + trail)

    def value(self, v: Any) -> Any:
        """Any other value: its strings (dict keys too) with their special strings wrapped."""
        if isinstance(v, str):
            return self._wrap(v)
        if isinstance(v, Mapping):
            return {self.value(k): self.value(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [self.value(x) for x in v]
        return v

    def _fields(self, obj: Any) -> Any:
        """A message, call, part or tool: free-text fields as text, nested objects recursively."""
        if not isinstance(obj, Mapping):
            return self.value(obj)
        out = {}
        for key, v in obj.items():
            if key in _TEXT_FIELDS and isinstance(v, str):
                out[self.value(key)] = self.text(v)
            elif key in ("content", "tool_calls", "function") and isinstance(v, (list, tuple, Mapping)):
                out[self.value(key)] = ([self._fields(x) for x in v] if isinstance(v, (list, tuple))
                                        else self._fields(v))
            else:
                out[self.value(key)] = self.value(v)
        return out

    def messages(self, messages: Iterable[Any]) -> list[Any]:
        """Chat messages (OpenAI-style dicts) with every request string marked."""
        return [self._fields(m) for m in messages]

    def tools(self, tools: Iterable[Any] | None) -> list[Any] | None:
        """Tool definitions (``{"type": "function", "function": {...}}``) marked; schemas wrapped
        only (templates compare their ``type`` values)."""
        if tools is None:
            return None
        out = []
        for tool in tools:
            fn = tool.get("function") if isinstance(tool, Mapping) else None
            if isinstance(fn, Mapping):
                out.append({self.value(k): (self._tool_function(v) if k == "function" else self.value(v))
                            for k, v in tool.items()})
            else:
                out.append(self._tool_function(tool))
        return out

    def _tool_function(self, fn: Any) -> Any:
        if not isinstance(fn, Mapping):
            return self.value(fn)
        return {self.value(k): (self.text(v) if k in ("name", "description") else self.value(v))
                for k, v in fn.items()}

    def locate(self, rendered: str) -> Located:
        """The rendering without its markers, the user spans and the cut points."""
        pieces: list[str] = []
        spans: list[tuple[int, int]] = []
        cuts: list[int] = []
        open_at: dict[tuple[str, str], list[int]] = {}
        pos = last = 0
        for m in self._found.finditer(rendered):
            pieces.append(rendered[last:m.start()])
            pos += m.start() - last
            last = m.end()
            kind, index = m.group(1), m.group(2)
            cuts.append(pos)
            if kind in _PAIRS:
                starts = open_at.get((_PAIRS[kind], index))
                if starts:
                    start = starts.pop()
                    if start < pos:
                        spans.append((start, pos))
            else:
                open_at.setdefault((kind, index), []).append(pos)
        pieces.append(rendered[last:])
        merged: list[tuple[int, int]] = []
        for a, b in sorted(spans):
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
            else:
                merged.append((a, b))
        return Located("".join(pieces), tuple(merged), tuple(sorted(set(cuts))))

    def leftovers(self, text: str, plain: str) -> bool:
        """True when ``text`` holds characters of this marker's markers that ``plain`` (the same
        inputs rendered unmarked) lacks: a template cut through a marker."""
        alphabet = set(self._nonce) | {_FRAME_OPEN, _FRAME_CLOSE, _OPEN, _CLOSE, _WRAP_OPEN, _WRAP_CLOSE}
        return bool((set(text) & alphabet) - set(plain))
