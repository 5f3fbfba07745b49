"""Where a growing JSON text is: the path of the value being written, character by character.

A small incremental scanner over JSON text as it streams (a content answer, a tool call's
arguments), for the per-token view: each token is attributed to the field whose text it ends
in.  A key belongs to the value it names (``"name": "Al`` is at ``$.name``), the separator
after a value to that value, a container's brackets to the container.  Text that is not JSON
(free decoding's prose) stays at the root, ``$``; nothing here ever raises on bad input.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass
class _Frame:
    """One open container: an object (its current key) or an array (its current index)."""

    is_object: bool
    key: str | None = None
    index: int = -1
    expect_key: bool = True  # object: before a key (vs. after its ':' or inside its value)
    has_value: bool = False  # array: the current index holds a value (a ',' moves on)


def format_path(parts: list[str | int]) -> str:
    """``["a", 0, "b c"]`` → ``$.a[0]["b c"]`` (JSONPath-like, what the page shows)."""
    out = ["$"]
    for p in parts:
        if isinstance(p, int):
            out.append(f"[{p}]")
        elif _IDENT.match(p):
            out.append(f".{p}")
        else:
            out.append(f"[{json.dumps(p, ensure_ascii=False)}]")
    return "".join(out)


class JsonPathScanner:
    """Feed text; :attr:`path` is the path of the value the last character belongs to."""

    def __init__(self) -> None:
        self._stack: list[_Frame] = []
        self._in_string = False
        self._escape = False
        self._key_chars: list[str] | None = None  # reading an object key's string

    def feed(self, text: str) -> None:
        """Scan ``text`` (the next characters of the JSON text)."""
        for ch in text:
            self._char(ch)

    def _char(self, ch: str) -> None:
        if self._in_string:
            if self._escape:
                self._escape = False
                self._key_add(ch)
            elif ch == "\\":
                self._escape = True
                self._key_add(ch)
            elif ch == '"':
                self._in_string = False
                if self._key_chars is not None:
                    self._stack[-1].key = _unescape("".join(self._key_chars))
                    self._key_chars = None
            else:
                self._key_add(ch)
            return
        top = self._stack[-1] if self._stack else None
        if ch == '"':
            self._in_string = True
            if top is not None and top.is_object and top.expect_key:
                self._key_chars = []
                top.key = None  # named once its first character is read
            else:
                self._value_starts()
        elif ch in "{[":
            self._value_starts()
            self._stack.append(_Frame(is_object=ch == "{"))
        elif ch in "}]":
            if self._stack:
                self._stack.pop()
        elif ch == ":":
            if top is not None and top.is_object:
                top.expect_key = False
        elif ch == ",":
            if top is not None:
                if top.is_object:
                    top.expect_key = True
                else:
                    top.has_value = False
        elif not ch.isspace():
            self._value_starts()

    def _key_add(self, ch: str) -> None:
        if self._key_chars is not None:
            self._key_chars.append(ch)
            self._stack[-1].key = "".join(self._key_chars)

    def _value_starts(self) -> None:
        """A value's first character: in an array it takes the next index."""
        top = self._stack[-1] if self._stack else None
        if top is not None and not top.is_object and not top.has_value:
            top.index += 1
            top.has_value = True

    @property
    def path(self) -> str:
        """The current value's path (``$`` at the top level)."""
        parts: list[str | int] = []
        for frame in self._stack:
            if frame.is_object:
                if frame.key is None:
                    break
                parts.append(frame.key)
            else:
                if frame.index < 0:
                    break
                parts.append(frame.index)
        return format_path(parts)


def _unescape(raw: str) -> str:
    """A whole key's text as written (escapes read); as written when they do not read."""
    try:
        return str(json.loads(f'"{raw}"'))
    except ValueError:
        return raw
