"""Values no tokenizer, template or grammar engine can take, refused where a request comes in.

JSON's ``\\uXXXX`` escapes can spell a lone UTF-16 surrogate (``"a\\ud800"``), which is not
Unicode text: the tokenizer raises a ``TypeError`` on it, and a grammar compile fails on it.
Python's JSON reader also takes ``NaN``, ``Infinity`` and numbers too large for a double
(``1e400`` reads as ``inf``), which JSON does not have.  :func:`check_values` finds the first of
either in a JSON-shaped value (every string, key and number) and raises a 400 naming its path.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ..errors import InvalidRequestError

_SURROGATE = re.compile("[\ud800-\udfff]")


def check_values(value: Any, path: str = "") -> None:
    """Raise :class:`InvalidRequestError` (``invalid_value``) for the first lone surrogate or
    non-finite number in ``value``; ``param`` is its path (``messages.0.content``) under
    ``path``, or the path of the object holding it for a key."""
    problem = find_bad_value(value, path)
    if problem is not None:
        where, what = problem
        raise InvalidRequestError(f"{where or 'the body'}: {what}", param=where or None,
                                  code="invalid_value")


def find_bad_value(value: Any, path: str = "") -> tuple[str, str] | None:
    """(path, what is wrong) of the first lone surrogate or non-finite number in ``value``, in
    document order; None when there is none.  Iterative: a deeply nested schema cannot exhaust
    the stack."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, str):
            # isascii() is O(1) in CPython: a long ASCII prompt costs nothing to check.
            bad = None if node.isascii() else _SURROGATE.search(node)
            if bad is not None:
                return where, _surrogate_message(bad, "the text")
        elif isinstance(node, float):
            if not math.isfinite(node):
                return where, (f"{node} is not a JSON number (NaN, Infinity or a number too large "
                               "for a double); send a finite number")
        elif isinstance(node, dict):
            for key in node:
                bad = _SURROGATE.search(key) if isinstance(key, str) and not key.isascii() else None
                if bad is not None:
                    return where, _surrogate_message(bad, "a key")
            stack.extend((item, f"{where}.{key}" if where else str(key))
                         for key, item in reversed(node.items()))
        elif isinstance(node, list | tuple):
            stack.extend((node[i], f"{where}.{i}" if where else str(i))
                         for i in range(len(node) - 1, -1, -1))
    return None


def _surrogate_message(bad: re.Match[str], subject: str) -> str:
    # The surrogate itself is not quoted: it cannot be written as UTF-8 in the error body.
    return (f"{subject} has a lone UTF-16 surrogate (U+{ord(bad.group()):04X}) at character "
            f"{bad.start()}, which is not Unicode text; escape a character outside the BMP as a "
            "surrogate pair (\\ud83d\\ude00) or send it as UTF-8")
