"""Which keys an object schema requires or forbids, as llguidance ``%if`` conditions.

The ``dependencies`` and ``oneOf`` rewrites, and schemas themselves, state key presence with
``required``, ``{"properties": {"k": false}}`` and the applicators over them.  Such a schema
is a boolean formula over "key k is present"; the any-order grammar (``any_order.py``) keeps
one bit per declared key and closes an object only when the formula holds on those bits.
"""

from __future__ import annotations

from typing import Any

from ..schema.keywords import ASSERTIONS

# llguidance's conditions have no constants: ``true`` is read as some condition that holds, and
# ``not(true)`` holds too (an object closed under "required key absent" took any keys). Written
# as tautology and contradiction over bit 0, which every rule parameter has.
TRUE = "or(bit_set(0), bit_clear(0))"
FALSE = "and(bit_set(0), bit_clear(0))"

JSON_TYPES = ("object", "array", "string", "number", "boolean", "null")


def json_types(schema: dict[str, Any]) -> list[str]:
    """The JSON types a schema's ``type`` admits (all of them when absent; integer ⊂ number)."""
    declared = schema.get("type", list(JSON_TYPES))
    declared = [declared] if isinstance(declared, str) else declared
    if not isinstance(declared, list):
        return []
    return [t for t in JSON_TYPES if t in declared or (t == "number" and "integer" in declared)]


def asserting(schema: dict[str, Any]) -> set[str]:
    """The keywords of ``schema`` that assert something."""
    return {k for k in schema if k in ASSERTIONS}


def is_false(schema: Any) -> bool:
    """True for schemas no value satisfies, in the spellings rewrites produce."""
    if schema is False:
        return True
    if not isinstance(schema, dict):
        return False
    keys = asserting(schema)
    if keys == {"not"}:
        return schema["not"] in (True, {})
    branches = schema.get("allOf")
    return keys == {"allOf"} and isinstance(branches, list) and any(is_false(b) for b in branches)


def all_of(conds: list[str]) -> str:
    """An llguidance condition true when every one of ``conds`` is."""
    out = conds[0] if conds else TRUE
    for c in conds[1:]:
        out = f"and({out}, {c})"
    return out


def any_of(conds: list[str]) -> str:
    """An llguidance condition true when one of ``conds`` is (false for none)."""
    if not conds:
        return FALSE
    out = conds[0]
    for c in conds[1:]:
        out = f"or({out}, {c})"
    return out


def presence(schema: Any, mentioned: set[str]) -> list[Any] | None:
    """``schema`` as a formula over which keys are present, or None if it says more.

    The formula is a nested list: ``["and"|"or"|"not", ...]``, ``["has", key]``, ``True``.
    Keys it mentions are added to ``mentioned``.
    """
    if schema is True or schema == {}:
        return [True]
    if is_false(schema):
        return ["not", [True]]
    if not isinstance(schema, dict):
        return None
    keys = asserting(schema)
    if not keys <= {"required", "properties", "allOf", "anyOf", "oneOf", "not", "type"}:
        return None
    if "type" in keys and "object" not in json_types(schema):
        return None
    parts: list[Any] = []
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        return None
    for key in required:
        mentioned.add(key)
        parts.append(["has", key])
    props = schema.get("properties", {})
    if not isinstance(props, dict):
        return None
    for key, sub in props.items():
        if is_false(sub):
            mentioned.add(key)
            parts.append(["not", ["has", key]])
        elif not (sub is True or sub == {}):
            return None
    for word in ("allOf", "anyOf", "oneOf"):
        branches = schema.get(word)
        if branches is None:
            continue
        if not isinstance(branches, list) or not branches:
            return None
        subs = [presence(b, mentioned) for b in branches]
        if any(x is None for x in subs):
            return None
        if word == "allOf":
            parts.extend(subs)
        elif word == "anyOf":
            parts.append(["or", *subs])
        else:  # exactly one branch holds
            parts.append(["or", *(["and", x, *(["not", y] for y in subs if y is not x)] for x in subs)])
    if "not" in schema:
        sub = presence(schema["not"], mentioned)
        if sub is None:
            return None
        parts.append(["not", sub])
    return ["and", *parts]


def condition(formula: list[Any], bits: dict[str, int], absent: set[str]) -> str:
    """A formula as an llguidance ``%if`` condition over the bits of ``bits``."""
    head = formula[0]
    if head is True:
        return TRUE
    if head == "has":
        key = formula[1]
        # A key without a bit (absent, or declared with a false schema) is never present.
        return FALSE if key in absent or key not in bits else f"bit_set({bits[key]})"
    subs = [condition(f, bits, absent) for f in formula[1:]]
    if head == "not":
        return f"not({subs[0]})"
    return all_of(subs) if head == "and" else any_of(subs)
