"""Prove that two JSON Schemas share no instance (so ``oneOf`` may be read as ``anyOf``).

The proof is conservative: ``False`` means "not proven", never "they overlap".  Evidence used:
disjoint instance types, disjoint ``const``/``enum`` sets, and for objects a discriminating
property (required on one side, with disjoint values or types on both) or a property one side
requires and the other's closed property list forbids.
"""

from __future__ import annotations

import json
from typing import Any

_ALL = frozenset({"null", "boolean", "object", "array", "integer", "nonint", "string"})
_MAX_REF_HOPS = 16


def resolve_local(node: Any, root: Any) -> Any:
    """Follow local ``#/...`` refs of a node that is only a ``$ref`` (others returned as is)."""
    for _ in range(_MAX_REF_HOPS):
        if not (isinstance(node, dict) and isinstance(node.get("$ref"), str)):
            return node
        ref = node["$ref"]
        if not ref.startswith("#"):
            return node
        target: Any = root
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(target, dict) and part in target:
                target = target[part]
            elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
                target = target[int(part)]
            else:
                return node
        # Sibling keywords next to $ref only narrow the schema (or are ignored, before 2019-09):
        # the target alone over-approximates it, which is what a disjointness proof may use.
        node = target
    return node


def _value_atoms(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    if isinstance(value, float):
        return "nonint"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _values(node: dict[str, Any]) -> list[Any] | None:
    if "const" in node:
        return [node["const"]]
    enum = node.get("enum")
    return list(enum) if isinstance(enum, list) else None


def type_atoms(node: Any, root: Any) -> frozenset[str]:
    """Instance kinds a schema can accept (over-approximated), ``number`` split in two."""
    node = resolve_local(node, root)
    if node is False:
        return frozenset()
    if not isinstance(node, dict):
        return _ALL
    atoms = _ALL
    t = node.get("type")
    if isinstance(t, str):
        t = [t]
    if isinstance(t, list):
        declared: set[str] = set()
        for name in t:
            declared |= {"integer", "nonint"} if name == "number" else {name}
        atoms = atoms & frozenset(declared)
    values = _values(node)
    if values is not None:
        atoms = atoms & frozenset(_value_atoms(v) for v in values)
    for key in ("allOf",):
        for sub in node.get(key, []) if isinstance(node.get(key), list) else []:
            atoms = atoms & type_atoms(sub, root)
    for key in ("anyOf", "oneOf"):
        subs = node.get(key)
        if isinstance(subs, list) and subs:
            union: frozenset[str] = frozenset()
            for sub in subs:
                union |= type_atoms(sub, root)
            atoms = atoms & union
    return atoms


def _canon(value: Any) -> str:
    # JSON equality: 1 == 1.0, but True != 1 (json.dumps keeps them apart).
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return json.dumps(value, sort_keys=True)


def _values_disjoint(a: Any, b: Any, root: Any) -> bool:
    a, b = resolve_local(a, root), resolve_local(b, root)
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return a is False or b is False
    va, vb = _values(a), _values(b)
    if va is not None and vb is not None:
        return not ({_canon(v) for v in va} & {_canon(v) for v in vb})
    return False


def schemas_disjoint(a: Any, b: Any, root: Any) -> bool:
    """True only when no JSON value is valid against both ``a`` and ``b``."""
    if not (type_atoms(a, root) & type_atoms(b, root)):
        return True
    if _values_disjoint(a, b, root):
        return True
    a, b = resolve_local(a, root), resolve_local(b, root)
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return False
    # Beyond this point only objects may be common to both.
    if not (type_atoms(a, root) & type_atoms(b, root)) <= {"object"}:
        return False
    return _objects_disjoint(a, b, root)


def _objects_disjoint(a: dict[str, Any], b: dict[str, Any], root: Any) -> bool:
    pa, pb = a.get("properties", {}), b.get("properties", {})
    ra, rb = set(a.get("required", [])), set(b.get("required", []))
    if not (isinstance(pa, dict) and isinstance(pb, dict)):
        return False
    for name in (ra | rb) & set(pa) & set(pb):
        if _values_disjoint(pa[name], pb[name], root):
            return True
        # One side requires it, so a common instance has it, with a value both sides accept.
        if not (type_atoms(pa[name], root) & type_atoms(pb[name], root)):
            return True
    # A property one side requires that the other side forbids.
    for req, other, oprops in ((ra, b, pb), (rb, a, pa)):
        closed = other.get("additionalProperties") is False and not other.get("patternProperties")
        for name in req:
            if (closed and name not in oprops) or oprops.get(name) is False:
                return True
    return False


def branches_disjoint(branches: list[Any], root: Any) -> bool:
    """True when every pair of ``branches`` is provably disjoint."""
    for i, a in enumerate(branches):
        for b in branches[i + 1:]:
            if not schemas_disjoint(a, b, root):
                return False
    return True
