"""A custom tool call's ``input``, read as its arguments stream in.

The model calls a custom tool as a function whose arguments are ``{"input": "<string>"}``
(:mod:`.tools`).  :class:`InputReader` decodes that string from the argument fragments as they
arrive, so ``response.custom_tool_call_input.delta`` events carry the input's own text, never
JSON; an escape split across fragments waits for its end.  At the close the whole arguments are
parsed, and that value is authoritative.
"""

from __future__ import annotations

import json
import re

_OPEN = re.compile(r'\{\s*"input"\s*:\s*"')
_SIMPLE = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


class InputReader:
    """Decodes the ``input`` string of a custom call's arguments, fragment by fragment."""

    def __init__(self) -> None:
        self.arguments = ""
        self._pos: int | None = None  # where the string's undecoded text starts
        self._shown = ""  # the input decoded so far
        self._done = False

    def feed(self, fragment: str) -> str:
        """The input text ``fragment`` completes (possibly empty)."""
        self.arguments += fragment
        if self._done:
            return ""
        if self._pos is None:
            match = _OPEN.match(self.arguments)
            if match is None:
                return ""
            self._pos = match.end()
        out = []
        text, i = self.arguments, self._pos
        while i < len(text):
            ch = text[i]
            if ch == '"':
                self._done = True
                i += 1
                break
            if ch != "\\":
                out.append(ch)
                i += 1
                continue
            if i + 1 >= len(text):
                break
            code = text[i + 1]
            if code in _SIMPLE:
                out.append(_SIMPLE[code])
                i += 2
                continue
            if code != "u" or i + 6 > len(text):
                break
            unit = int(text[i + 2:i + 6], 16)
            if 0xD800 <= unit < 0xDC00:  # a surrogate pair: wait for the low half
                if i + 12 > len(text):
                    break
                low = int(text[i + 8:i + 12], 16)
                out.append(chr(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)))
                i += 12
                continue
            out.append(chr(unit))
            i += 6
        self._pos = i
        piece = "".join(out)
        self._shown += piece
        return piece

    def close(self) -> tuple[str, str]:
        """(the whole input, the part not shown yet): the arguments parsed as a whole, or what
        was decoded when they do not parse (a call cut by the budget)."""
        try:
            value = json.loads(self.arguments)
        except ValueError:
            return self._shown, ""
        whole = value.get("input") if isinstance(value, dict) else None
        if not isinstance(whole, str):
            return self._shown, ""
        rest = whole[len(self._shown):] if whole.startswith(self._shown) else ""
        return whole, rest
