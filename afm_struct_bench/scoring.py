"""Field-level accuracy of an extraction against its known answer.

A *leaf* is one scalar of the expected value, addressed by a path like ``recipient.city`` or
``line_items[1].quantity``.  The score is the fraction of expected leaves the prediction gets
right: strings compare after case folding and whitespace collapsing, numbers by value (``14``
equals ``14.0``; a number never equals a string or a boolean), booleans and null exactly.

Arrays of objects compare position by position (the order of line items is part of the
answer); arrays of scalars compare as multisets, because the order of ``["C/C++", "ROS 2"]``
is not.  Extra predicted fields cost nothing here: schema validity measures those.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

_MISSING = object()


@dataclass(frozen=True)
class FieldScore:
    """Matched leaves out of ``total``, with the paths that were missing or wrong."""

    matched: int
    total: int
    missing: tuple[str, ...] = field(default=())
    wrong: tuple[str, ...] = field(default=())

    @property
    def accuracy(self) -> float:
        """``matched / total`` (1.0 when nothing was expected)."""
        return self.matched / self.total if self.total else 1.0


def normalize_string(text: str) -> str:
    """Case-folded, whitespace collapsed and stripped."""
    return " ".join(text.casefold().split())


def scalar_equal(expected: Any, predicted: Any) -> bool:
    """Leaf equality: normalised strings, numbers by value, booleans and null exactly."""
    # bool is an int subclass in Python; JSON true must not equal 1.
    if isinstance(expected, bool) or isinstance(predicted, bool):
        return isinstance(expected, bool) and isinstance(predicted, bool) and expected == predicted
    if isinstance(expected, int | float) and isinstance(predicted, int | float):
        return math.isclose(expected, predicted, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(expected, str) and isinstance(predicted, str):
        return normalize_string(expected) == normalize_string(predicted)
    if expected is None:
        return predicted is None
    return False


def _is_scalar(value: Any) -> bool:
    return not isinstance(value, dict | list)


def _leaves(expected: Any, predicted: Any, path: str) -> Iterator[tuple[str, bool | None]]:
    """``(path, True/False)`` per expected leaf; ``None`` marks a missing prediction."""
    if isinstance(expected, dict) and expected:
        for key, sub in expected.items():
            child = predicted.get(key, _MISSING) if isinstance(predicted, dict) else _MISSING
            yield from _leaves(sub, child, f"{path}.{key}" if path else key)
    elif isinstance(expected, list) and expected and all(_is_scalar(v) for v in expected):
        pool = list(predicted) if isinstance(predicted, list) else []
        for i, item in enumerate(expected):
            hit = next((j for j, p in enumerate(pool) if _is_scalar(p) and scalar_equal(item, p)), None)
            if hit is not None:
                pool.pop(hit)
            missing = not isinstance(predicted, list) or (hit is None and i >= len(predicted))
            yield f"{path}[{i}]", None if missing else hit is not None
    elif isinstance(expected, list) and expected:
        for i, item in enumerate(expected):
            ok = isinstance(predicted, list) and i < len(predicted)
            yield from _leaves(item, predicted[i] if ok else _MISSING, f"{path}[{i}]")
    elif predicted is _MISSING:
        yield path or "$", None
    elif isinstance(expected, dict | list):  # an empty container is one leaf
        yield path or "$", expected == predicted
    else:
        yield path or "$", scalar_equal(expected, predicted)


def score_fields(expected: Any, predicted: Any) -> FieldScore:
    """Compare ``predicted`` (a parsed value, or None when nothing parsed) with ``expected``."""
    matched, total = 0, 0
    missing: list[str] = []
    wrong: list[str] = []
    for path, verdict in _leaves(expected, predicted, ""):
        total += 1
        if verdict:
            matched += 1
        elif verdict is None:
            missing.append(path)
        else:
            wrong.append(path)
    return FieldScore(matched, total, tuple(missing), tuple(wrong))


def count_leaves(expected: Any) -> int:
    """How many leaves ``expected`` has (the denominator of its score)."""
    return score_fields(expected, expected).total
