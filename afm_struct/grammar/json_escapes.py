"""A workaround for llguidance 1.9.1's JSON strings: in a ``pattern`` whose character class
holds U+0000 but not ``\\`` or ``"``, the engine still accepts the escapes ``\\\\`` / ``\\"``,
i.e. a string with the excluded character (``^[^\\\\]+$`` accepted ``"js\\\\sub"``: a wrong
acceptance).  A class without U+0000 is enforced exactly, so every negated class handed to the
engine excludes U+0000 too: such strings never contain NUL (a narrowing, documented in
docs/constraints.md), and never the characters their pattern excludes.
"""

from __future__ import annotations

import json
from typing import Any

_NUL = "\\x00"
_DATA = ("enum", "const", "default", "examples")


def guard_pattern(pattern: str) -> str:
    """``pattern`` with ``\\x00`` added to every negated class (``[^...]``)."""
    if "[^" not in pattern:
        return pattern
    out: list[str] = []
    i, n, in_class = 0, len(pattern), False
    while i < n:
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
            out.append(c)
            i += 1
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
    ``patternProperties`` key (the same object when no pattern has a negated class);
    ``text``: ``schema`` already serialized, not dumped again."""
    if "[^" not in (json.dumps(schema, ensure_ascii=False) if text is None else text):
        return schema
    return _walk(schema)


def _walk(node: Any) -> Any:
    if isinstance(node, list):
        return [_walk(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DATA:
            out[key] = value
        elif key == "pattern" and isinstance(value, str):
            out[key] = guard_pattern(value)
        elif key == "patternProperties" and isinstance(value, dict):
            out[key] = {guard_pattern(k): _walk(v) for k, v in value.items()}
        else:
            out[key] = _walk(value)
    return out
