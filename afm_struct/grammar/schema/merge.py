"""Conjunctions of schemas (``allOf``, a node next to its ``anyOf``) as one schema or a union of
single schemas, for the any-order grammar (:mod:`.any_order`), which can write a plain object,
array or scalar as rules but embeds everything else as a schema-order ``%json`` leaf.

``merge(a, b)`` is one schema valid exactly where both are, or None when the keywords interact in
ways not modelled here (``$ref`` siblings, ``patternProperties``, tuples, ``if``...).
``conjuncts`` flattens nested ``allOf``s; ``distribute`` turns ``X ∧ anyOf[B1..Bn]`` into
``anyOf[X ∧ B1, ..., X ∧ Bn]``.  Every step keeps the set of valid instances.
"""

from __future__ import annotations

from typing import Any

from ..engines.key_presence import asserting
from .paths import MISSING, resolve_pointer
from .value_kinds import contained

_TYPES = ("null", "boolean", "object", "array", "string", "integer", "number")
_OBJECT = frozenset({"properties", "required", "additionalProperties"})
# Keywords merged by a rule of their own below; any other keyword must sit on one side only.
_LOWER = ("minLength", "minItems", "minProperties", "minimum", "exclusiveMinimum")
_UPPER = ("maxLength", "maxItems", "maxProperties", "maximum", "exclusiveMaximum")
# Keywords whose meaning depends on a sibling: not merged (the conjunction stays as it is).
_INTERACTING = frozenset({"$ref", "patternProperties", "prefixItems", "additionalItems", "if", "then",
                          "else", "unevaluatedProperties", "unevaluatedItems", "minContains",
                          "maxContains", "dependencies", "dependentSchemas", "dependentRequired",
                          "propertyNames", "$dynamicRef", "$recursiveRef", "allOf", "anyOf", "oneOf",
                          "not", "enum", "const"})
MAX_BRANCHES = 32


def deref(root: Any, schema: Any) -> Any:
    """A bare ``{"$ref": ...}`` replaced by its local target (one level); anything else as is."""
    if isinstance(schema, dict) and asserting(schema) == {"$ref"} and isinstance(schema["$ref"], str):
        target = resolve_pointer(root, schema["$ref"])
        if target is not MISSING:
            return target
    return schema


def conjuncts(root: Any, schema: dict[str, Any]) -> list[Any]:
    """The schemas whose conjunction ``schema`` is: its own keywords and its ``allOf`` members,
    nested bare ``allOf``s and bare ``$ref``s followed."""
    rest = {k: v for k, v in schema.items() if k in asserting(schema) and k not in ("allOf", "anyOf")}
    out: list[Any] = [rest] if rest else []
    if "anyOf" in schema:
        out.append({"anyOf": schema["anyOf"]})
    members = schema.get("allOf")
    for m in members if isinstance(members, list) else []:
        m = deref(root, m)
        if isinstance(m, dict) and asserting(m) == {"allOf"}:
            out.extend(conjuncts(root, m))
        else:
            out.append(m)
    return out


def distribute(root: Any, parts: list[Any]) -> list[Any] | None:
    """``parts`` (a conjunction) with its first ``anyOf`` part pulled out: one conjunction per
    branch; None when no part is a bare ``anyOf`` or there are too many branches."""
    for i, part in enumerate(parts):
        part = deref(root, part)
        if isinstance(part, dict) and asserting(part) == {"anyOf"} and isinstance(part["anyOf"], list):
            branches = part["anyOf"]
            if not 1 <= len(branches) <= MAX_BRANCHES:
                return None
            others = parts[:i] + parts[i + 1:]
            return [{"allOf": [*others, b]} if others else b for b in branches]
    return None


def merge_all(root: Any, parts: list[Any]) -> Any | None:
    """One schema for the conjunction of ``parts`` (``True`` when empty), or None."""
    out: Any = True
    for part in parts:
        out = merge(out, deref(root, part))
        if out is None:
            return None
    return out


def merge(a: Any, b: Any) -> Any | None:
    """One schema valid exactly where ``a`` and ``b`` both are, or None."""
    if a is True or a == {}:
        return b
    if b is True or b == {}:
        return a
    if a is False or b is False:
        return False
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return None
    a, b = contained(a), contained(b)
    ka, kb = asserting(a), asserting(b)
    if (ka | kb) & _INTERACTING:
        return None
    out: dict[str, Any] = {}
    types = _types(a.get("type"), b.get("type"))
    if types is None:
        return None
    if not types:
        return False
    if "type" in ka | kb:
        out["type"] = types[0] if len(types) == 1 else types
    if (ka | kb) & _OBJECT:
        obj = _objects(a, b)
        if obj is None:
            return None
        out.update(obj)
    if "items" in ka and "items" in kb:
        if not (isinstance(a["items"], dict | bool) and isinstance(b["items"], dict | bool)):
            return None
        out["items"] = {"allOf": [a["items"], b["items"]]}
    for key in _LOWER + _UPPER:
        values = [s[key] for s in (a, b) if key in s]
        if not values:
            continue
        if any(isinstance(v, bool) or not isinstance(v, int | float) for v in values):
            return None  # draft 4's boolean exclusive bounds
        out[key] = max(values) if key in _LOWER else min(values)
    for key in (ka | kb) - {"type", "items"} - _OBJECT - set(_LOWER) - set(_UPPER):
        if key in ka and key in kb and a[key] != b[key]:
            return None
        out[key] = a[key] if key in ka else b[key]
    for key in ("items",):
        if key in ka and key not in kb:
            out[key] = a[key]
        elif key in kb and key not in ka:
            out[key] = b[key]
    return out


def _types(x: Any, y: Any) -> list[str] | None:
    """The ``type`` names both admit (all of them for an absent one; None: not a type value)."""
    sets = []
    for t in (x, y):
        names = list(_TYPES) if t is None else [t] if isinstance(t, str) else t
        if not isinstance(names, list) or not all(n in _TYPES for n in names):
            return None
        expanded = set(names) | ({"integer"} if "number" in names else set())
        sets.append(expanded)
    both = sets[0] & sets[1]
    if {"number", "integer"} <= both:
        both.discard("integer")
    return [t for t in _TYPES if t in both]


def _objects(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any] | None:
    """The object keywords of ``a ∧ b``: each key gets its schema in ``a`` (its
    ``additionalProperties`` if undeclared) and in ``b``; required is the union."""
    props_a, props_b = a.get("properties", {}), b.get("properties", {})
    req_a, req_b = a.get("required", []), b.get("required", [])
    extra_a, extra_b = a.get("additionalProperties", True), b.get("additionalProperties", True)
    if not (isinstance(props_a, dict) and isinstance(props_b, dict) and isinstance(req_a, list)
            and isinstance(req_b, list)):
        return None
    out: dict[str, Any] = {
        "properties": {k: _both(props_a.get(k, extra_a), props_b.get(k, extra_b))
                       for k in dict.fromkeys([*props_a, *props_b])}}
    required = list(dict.fromkeys([*req_a, *req_b]))
    if required:
        out["required"] = required
    extra = _both(extra_a, extra_b)
    if extra is not True and extra != {}:
        out["additionalProperties"] = extra
    return out


def _both(x: Any, y: Any) -> Any:
    parts = [p for p in (x, y) if p is not True and p != {}]
    if any(p is False for p in parts):
        return False
    return parts[0] if len(parts) == 1 else {"allOf": parts} if parts else {}
