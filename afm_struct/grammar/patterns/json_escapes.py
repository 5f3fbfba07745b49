"""Patterns as llguidance must read them to mean what JSON Schema validation means.

Two workarounds for llguidance 1.9.1, applied to every ``pattern`` and ``patternProperties``
key before the engine sees them:

* **JSON strings.** In a ``pattern`` whose character class holds U+0000 but not ``\\`` or
  ``"``, the engine still accepts the escapes ``\\\\`` / ``\\"``, i.e. a string with the
  excluded character (``^[^\\\\]+$`` accepted ``"js\\\\sub"``: a wrong acceptance).  A class
  without U+0000 is enforced exactly, so every negated class handed to the engine excludes
  U+0000 too: such strings never contain NUL (a narrowing, documented in docs/constraints.md),
  and never the characters their pattern excludes.
* **Braces.** Validation reads a pattern with Python's ``re``, where ``{`` opens a repeat only
  as ``{m}``, ``{m,}``, ``{,n}`` or ``{m,n}`` (digits only) and is a plain character otherwise.
  llguidance's regex syntax (Rust's) also reads ``a{ 3}``, ``a{3 }`` or ``a{3, 5}`` as repeats:
  ``^a{ 3}$`` was enforced as ``aaa`` while validation wants the text ``a{ 3}``, and
  ``^a{ 1000000}$`` passed the forced-run budget (which reads it as Python does) and then ran
  the lexer out of fuel in mid-output.  It refuses ``a{,2}``, ``a{}``, ``a{x}`` and a lone
  ``{``.  So every brace that is not a repeat to Python is escaped, and ``{,n}`` is written
  ``{0,n}``; the ``{...}`` of ``\\p{..}``, ``\\P{..}``, ``\\x{..}`` and ``\\u{..}`` escapes is
  left as it is.
"""

from __future__ import annotations

import json
import re
from typing import Any

_NUL = "\\x00"
_DATA = ("enum", "const", "default", "examples")


# A repeat as Python's re reads it: digits only, "{}" excepted (a plain "{" then "}").
_REPEAT = re.compile(r"\{(\d*)(,(\d*))?\}")
# Escapes whose own braces follow them (\p{Greek}, \x{41}).
_BRACED_ESCAPES = frozenset("pPxu")


def guard_pattern(pattern: str) -> str:
    """``pattern`` with ``\\x00`` added to every negated class (``[^...]``) and its braces
    written as Python's ``re`` reads them (see the module docstring)."""
    if "[^" not in pattern and "{" not in pattern:
        return pattern
    out: list[str] = []
    i, n, in_class = 0, len(pattern), False
    while i < n:
        c = pattern[i]
        if c == "\\":
            end = i + 2
            if pattern[i + 1:i + 2] in _BRACED_ESCAPES and pattern.startswith("{", end):
                close = pattern.find("}", end)
                end = n if close < 0 else close + 1
            out.append(pattern[i:end])
            i = end
            continue
        if in_class:
            if c == "]":
                in_class = False
            out.append(c)
            i += 1
            continue
        if c == "{":
            repeat = _REPEAT.match(pattern, i)
            if repeat is None or repeat.group(0) == "{}":
                out.append("\\{")  # a plain character to Python
                i += 1
            else:
                low, comma, high = repeat.group(1), repeat.group(2), repeat.group(3)
                out.append("{" + (low or "0") + (("," + high) if comma else "") + "}")
                i = repeat.end()
            continue
        if c == "[":
            in_class = True
            if pattern.startswith("[^", i):
                out.append("[^" + _NUL)
                i += 2
                if i < n and pattern[i] == "]":  # "[^]...]": the "]" is the class's first member
                    out.append("\\]")
                    i += 1
                continue
            out.append(c)
            i += 1
            if i < n and pattern[i] == "]":
                out.append("\\]")
                i += 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def guard_patterns(schema: Any, text: str | None = None) -> Any:
    """``schema`` with :func:`guard_pattern` applied to every ``pattern`` and
    ``patternProperties`` key (the same object when no pattern changes); ``text``: ``schema``
    already serialized (no pattern in it, or none with a negated class or a brace: no walk)."""
    text = json.dumps(schema) if text is None else text
    if '"pattern' not in text or ("[^" not in text and not _LOOSE_BRACE.search(text)):
        return schema
    return _walk(schema)


# A brace inside a JSON string, as far as the text shows: JSON's own braces follow ":", ",",
# "[" or "{" (or start the text) and are followed by '"' or "}", and an empty object "{}" by
# ",", "}" or "]" (a string's "{}" ends before a '"' at the latest).
_LOOSE_BRACE = re.compile(r'(?<=[^:,\[{])\{|\{(?=[^"}])|\{\}(?=[^,}\]])')


def _walk(node: Any) -> Any:
    """``node`` with its patterns guarded: the same object where nothing changes."""
    if isinstance(node, list):
        items = [_walk(v) for v in node]
        return node if all(a is b for a, b in zip(items, node, strict=True)) else items
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    changed = False
    for key, value in node.items():
        if key in _DATA:
            new = value
        elif key == "pattern" and isinstance(value, str):
            new = guard_pattern(value)
        elif key == "patternProperties" and isinstance(value, dict):
            new = {guard_pattern(k): _walk(v) for k, v in value.items()}
            if all(k == g and v is w for (k, v), (g, w) in zip(value.items(), new.items(), strict=True)):
                new = value
        else:
            new = _walk(value)
        changed = changed or new is not value
        out[key] = new
    return out if changed else node
