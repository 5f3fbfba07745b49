"""The Lark text the any-order translation writes: JSON literals, regex literals, punctuation.

:mod:`.any_order` builds rules; this module spells their terminals so that each one writes
exactly the JSON text llguidance's own ``%json`` would (same separators, same whitespace).
"""

from __future__ import annotations

import json
import re
from typing import Any

# llguidance's own JSON string (escapes unchecked past their shape, as in its %json leaves).
_STRING = r'/"(\\(["\\\/bfnrt]|u[a-fA-F0-9]{4})|[^"\\\x00-\x1F\x7F])*"/'
SCALARS = {"string": "STRING", "integer": "INTEGER", "number": "NUMBER", "boolean": "BOOLEAN",
            "null": "NULL"}
SCALAR_TERMINALS = {
    "STRING": _STRING, "INTEGER": "/-?(0|[1-9][0-9]*)/",
    "NUMBER": r"/-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/", "BOOLEAN": '"true" | "false"',
    "NULL": '"null"'}
_WS = "[\\x20\\x0A\\x0D\\x09]"
_REGEX_META = set("\\.+*?()|[]{}^$#&-~/")


def lark_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


_PLAIN = re.compile(r"[A-Za-z0-9_\- .$@]*")


def json_literal(value: Any) -> str:
    """A Lark string literal for the JSON text of ``value`` (plain keys skip two json.dumps)."""
    if isinstance(value, str) and _PLAIN.fullmatch(value):
        return '"\\"' + value + '\\""'
    return lark_string(json.dumps(value, ensure_ascii=False))


def escape_slashes(regex: str) -> str:
    """``regex`` with every unescaped ``/`` escaped (same language, safe inside ``/.../``)."""
    out: list[str] = []
    escaped = False
    for c in regex:
        if c == "/" and not escaped:
            out.append("\\")
        out.append(c)
        escaped = c == "\\" and not escaped
    return "".join(out)


def regex_literal(text: str) -> str:
    return "".join("\\" + c if c in _REGEX_META else c for c in text)


# A key's characters as json.dumps writes them (ensure_ascii=False): raw where JSON allows, a short
# escape for '"', '\\' and the five controls that have one, \u00xx (lower-case) for the others.
# One spelling per key, so excluding a declared key's spelling excludes the key itself.
_CANONICAL_CHAR = r'([^"\\\x00-\x1F\x7F]|\\["\\bfnrt]|\\u00(0[0-7bef]|1[0-9a-f]))'
_RAW_CHAR = r'[^"\\\x00-\x1F\x7F]'


def extra_key_regex(declared: list[str], body: str | None, exclude: str | None) -> str:
    """A Lark regex for the quoted keys an object takes besides its ``declared`` ones: those
    matching the regex ``body`` when given and not ``exclude`` when given.

    Written without escapes where a pattern is involved (a pattern reads the decoded key, the
    regex its spelling: with no escape they are the same text); otherwise in their canonical
    spelling, escapes included.  One regex over the whole quoted key: llguidance computes masks
    ~30x slower when the intersection and complement sit inside the quotes of a composed
    terminal."""
    char = _RAW_CHAR if body is not None or exclude is not None else _CANONICAL_CHAR
    regex = f'/"{char}*"/'
    if body is not None:
        regex += f' & /"({body})"/'
    if exclude is not None:
        regex += f' & ~/"({exclude})"/'
    if declared:
        spelled = (json.dumps(k, ensure_ascii=False)[1:-1] for k in declared)
        regex += ' & ~/"(' + "|".join(regex_literal(k) for k in spelled) + ')"/'
    return regex


def punctuation(options: dict[str, Any]) -> dict[str, str]:
    """Lark terminals for ``{ } [ ] , :`` that write exactly what the JSON options write."""
    if options.get("whitespace_flexible"):
        ws = options.get("whitespace_pattern") or f"{_WS}*"
        return {"LBRACE": f"/\\{{{ws}/", "RBRACE": f"/{ws}\\}}/", "LBRACK": f"/\\[{ws}/",
                "RBRACK": f"/{ws}\\]/", "COMMA": f"/{ws},{ws}/", "COLON": f"/{ws}:{ws}/"}
    return {"LBRACE": '"{"', "RBRACE": '"}"', "LBRACK": '"["', "RBRACK": '"]"',
            "COMMA": lark_string(options.get("item_separator", ",")),
            "COLON": lark_string(options.get("key_separator", ":"))}
