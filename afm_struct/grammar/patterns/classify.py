"""Classify JSON Schema ``pattern`` regexes: which ones no token-mask engine can enforce, and why.

Lookarounds and backreferences are not regular, so no finite-automaton engine (llguidance,
outlines-core) takes them; naming the feature turns a vague compile error into a precise
downgrade reason (``regex_lookaround``, ``regex_backreference``).  ``interegular`` parses the
pattern; a lexical scan backs it up for syntax interegular rejects outright.
"""

from __future__ import annotations

import re
from typing import Any

import interegular
from interegular import patterns as _p

# Lexical fallbacks, applied to the pattern with escaped backslashes removed.
_LOOKAROUND = re.compile(r"\(\?<?[=!]")
_BACKREF = re.compile(r"\\[1-9]|\\k<|\(\?P=")


def _walk_has_lookaround(node: Any) -> bool:
    """True when interegular's tree contains a zero-width group (its ``_NonCapturing``)."""
    if isinstance(node, _p._NonCapturing):
        return True
    if isinstance(node, _p.Pattern):
        return any(_walk_has_lookaround(o) for o in node.options)
    if isinstance(node, _p._Concatenation):
        return any(_walk_has_lookaround(p) for p in node.parts)
    if isinstance(node, _p._Repeated):
        return _walk_has_lookaround(node.base)
    return False


def _strip_anchors(pattern: str) -> str:
    """Drop a leading ``^`` and trailing unescaped ``$``: interegular does not parse anchors."""
    body = pattern[1:] if pattern.startswith("^") else pattern
    if body.endswith("$") and not body.endswith("\\$"):
        body = body[:-1]
    return body


def classify_pattern(pattern: str) -> str | None:
    """``None`` when ``pattern`` is regular, else a reason: ``regex_lookaround``,
    or ``regex_backreference``."""
    plain = pattern.replace("\\\\", "")
    if _BACKREF.search(plain):
        return "regex_backreference"
    if _LOOKAROUND.search(plain):
        return "regex_lookaround"
    try:
        tree = interegular.parse_pattern(_strip_anchors(pattern))
    except _p.Unsupported as exc:
        text = str(exc)
        if "reference" in text:
            return "regex_backreference"
        # interegular is stricter than Rust's regex (anchors mid-pattern, \p{..} classes):
        # not conclusive, so leave the verdict to the engine.
        return None
    except Exception:  # interegular's parser raises assorted errors on odd-but-valid syntax
        return None
    return "regex_lookaround" if _walk_has_lookaround(tree) else None


def first_irregular_pattern(schema: Any) -> str | None:
    """The reason of the first non-regular ``pattern`` / ``patternProperties`` key in ``schema``."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "pattern" and isinstance(value, str):
                    reason = classify_pattern(value)
                    if reason:
                        return reason
                elif key == "patternProperties" and isinstance(value, dict):
                    for name in value:
                        reason = classify_pattern(name)
                        if reason:
                            return reason
                if key not in ("enum", "const", "default", "examples"):
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)
    return None
