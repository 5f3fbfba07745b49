"""The kinds of JSON value the rewrites reason about, and ``type`` schemas for sets of them.

``number`` splits in two: ``integer`` and ``nonint`` (a number with a fraction), because JSON
Schema can say "integer" but llguidance cannot say "a number that is not an integer".
"""

from __future__ import annotations

import contextvars
from typing import Any

ATOMS = frozenset({"null", "boolean", "object", "array", "string", "integer", "nonint"})
_ORDER = ("null", "boolean", "object", "array", "string")


def atoms_of(schema: Any) -> frozenset[str]:
    """The value kinds ``schema``'s own ``type`` admits (all of them without one)."""
    t = schema.get("type") if isinstance(schema, dict) else None
    names = [t] if isinstance(t, str) else t if isinstance(t, list) else None
    if names is None:
        return ATOMS
    out: set[str] = set()
    for name in names:
        out |= {"integer", "nonint"} if name == "number" else {name} & ATOMS
    return frozenset(out)


def type_schema(atoms: frozenset[str]) -> dict[str, Any] | None:
    """``{"type": ...}`` for exactly ``atoms``; None for "a number that is not an integer"."""
    if "nonint" in atoms and "integer" not in atoms:
        return None
    names = [t for t in _ORDER if t in atoms]
    if "integer" in atoms:
        names.append("number" if "nonint" in atoms else "integer")
    return {"type": names[0] if len(names) == 1 else names}


def num_type(atoms: frozenset[str]) -> str | None:
    """The ``type`` name for the numbers in ``atoms`` (None: none, or non-integers only)."""
    if "integer" in atoms and "nonint" in atoms:
        return "number"
    return "integer" if "integer" in atoms else None


def kind_of(value: Any) -> str:
    """The JSON type name of a value (``number`` for both integers and floats)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return {str: "string", list: "array", dict: "object"}.get(type(value), "")


def all_of(parts: list[Any]) -> Any:
    """The conjunction of ``parts``, simplified (``true`` dropped, ``false`` absorbing)."""
    parts = [p for p in parts if p is not True and p != {}]
    if any(p is False for p in parts):
        return False
    if not parts:
        return True
    return parts[0] if len(parts) == 1 else {"allOf": parts}


# False: negations never say "some item..." (the rewrites as before contains; the compiler
# retries with it off when a schema written with contains is not served exact).
ITEM_CONTAINS: contextvars.ContextVar[bool] = contextvars.ContextVar("item_contains", default=True)


def contains(schema: Any, draft: int) -> dict[str, Any]:
    """The keywords of "some item is valid against ``schema``": ``contains``, or in drafts 3-4,
    which lack it, ``not: {items: {not: schema}}`` (what :func:`contained` reads back).
    llguidance's JSON compiler takes neither; the any-order grammar writes both."""
    if draft in (3, 4):
        return {"not": {"items": {"not": schema}}}
    return {"contains": schema}


def contained(schema: Any) -> Any:
    """``schema`` with a drafts 3-4 "some item" (see :func:`contains`) spelled ``contains``."""
    inner = schema.get("not") if isinstance(schema, dict) and "contains" not in schema else None
    if (isinstance(inner, dict) and set(inner) == {"items"} and isinstance(inner["items"], dict)
            and set(inner["items"]) == {"not"}):
        return {**{k: v for k, v in schema.items() if k != "not"}, "contains": inner["items"]["not"]}
    return schema
