"""What of a library's complaint about a user's schema, regex or grammar may reach the user.

The engines explain a bad input in their own words: llguidance quotes the grammar it generated,
draws carets under it and names its internal rules; jsonschema prints Python reprs of the
offending value.  A 400 must say what to fix in the request's terms, so the messages sent out
are built here from parts that cannot carry engine state: a line/column, a short diagnostic
phrase (one line, no brackets or braces, bounded length: a fixed phrase such as "unclosed
group", never a dump), the keyword that failed and the user's own value as JSON.  The full
engine text stays in the exception chain (``raise ... from exc``) for the server log.
"""

from __future__ import annotations

import json
import re
from typing import Any

_LOCATION = re.compile(r"^(?:at )?(\d+)\((\d+)\): ")
# A phrase safe to show: one line of words, no brackets/braces (which is how state dumps, reprs
# and code excerpts look), at most 120 characters.
_PHRASE = re.compile(r"^[A-Za-z][A-Za-z0-9 ,.:;'\"<=>_/-]{0,119}$")
_UNKNOWN_NAME = re.compile(r'unknown name: "([A-Za-z0-9_]{1,64})"')


def safe_phrase(text: str) -> str | None:
    """``text`` stripped if it is a plain diagnostic phrase (see module doc), else None."""
    text = text.strip().rstrip(".")
    return text if _PHRASE.match(text) else None


def regex_problem(message: str) -> str:
    """Why an engine refused a regex: regex-syntax's ``error: ...`` line when plain, else generic."""
    for line in reversed(message.splitlines()):
        if line.startswith("error: "):
            phrase = safe_phrase(line[len("error: "):])
            if phrase:
                return phrase
    return "the pattern is not a valid regular expression for the grammar engine"


def grammar_problem(message: str) -> str:
    """Why llguidance refused a Lark grammar: where (line, column) and a plain reason."""
    first = message.strip().splitlines()[0] if message.strip() else ""
    where = ""
    if m := _LOCATION.match(first):
        where = f"at line {m.group(1)}, column {m.group(2)}: "
        first = first[m.end():]
    if m := _UNKNOWN_NAME.search(first):
        return f'{where}unknown rule or terminal name "{m.group(1)}"'
    if "too deeply nested" in first:
        # llguidance's Lark parser stops at about 28 levels of parentheses / brackets.
        return (f"{where}groups nested too deeply for the grammar engine (at most about 28 levels of "
                "parentheses or brackets): move inner groups into named rules")
    if "invalid regex" in first:
        return f"{where}invalid regex ({regex_problem(message)})"
    if first.startswith("failed to compile JSON schema"):
        detail = safe_phrase(first.split(":", 1)[1]) if ":" in first else None
        return f"{where}the %json schema does not compile" + (f" ({detail})" if detail else "")
    phrase = safe_phrase(first)
    return f"{where}{phrase}" if phrase else f"{where}the grammar does not compile"


def _shown(value: Any, limit: int = 60) -> str:
    """The user's value as compact JSON, cut to ``limit`` characters."""
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        text = "the value"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def meta_schema_problem(error: Any) -> str:
    """A jsonschema meta-schema failure in words and JSON (no Python reprs)."""
    keyword, expected, value = error.validator, error.validator_value, error.instance
    if keyword == "type":
        kinds = expected if isinstance(expected, list) else [expected]
        return f"{_shown(value)} must be of type {' or '.join(map(str, kinds))}"
    if keyword in ("enum", "const"):
        return f"{_shown(value)} is not one of the allowed values"
    if keyword in ("anyOf", "oneOf"):
        return f"{_shown(value)} is not a valid value for this keyword"
    if keyword == "required":
        return f"a required member is missing (one of {_shown(expected)})"
    if keyword in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum",
                   "minItems", "maxItems", "minLength", "maxLength", "minProperties"):
        return f"{_shown(value)} breaks the meta-schema's {keyword} {_shown(expected)}"
    if keyword == "format":
        return f"{_shown(value)} is not a valid {expected}"
    if keyword == "uniqueItems":
        return f"{_shown(value)} must not repeat items"
    return f"{_shown(value)} fails the meta-schema's {keyword!s} rule"
