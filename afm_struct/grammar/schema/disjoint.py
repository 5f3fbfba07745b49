"""Prove that two JSON Schemas share no instance (so ``oneOf`` may be read as ``anyOf``).

The proof is conservative: ``False`` means "not proven", never "they overlap".  Evidence used:
disjoint instance types (within the kinds the enclosing schema admits), disjoint ``const``/``enum``
sets, ``enum`` values the other side rejects (checked by jsonschema), string constraints whose
languages do not meet (patterns, lengths, enums: :mod:`.pattern_lang`), and for objects a
discriminating property (required on one side, with disjoint values on both) or a property one
side requires and the other's closed property list forbids.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Callable
from typing import Any

_ALL = frozenset({"null", "boolean", "object", "array", "integer", "nonint", "string"})
_MAX_REF_HOPS = 16
# Draft 4 has no ``const`` (jsonschema ignores it): set while a draft-3/4 proof runs.  A context
# variable, not a module global: compiles run in worker threads at the same time.
_CONST_IGNORED: contextvars.ContextVar[bool] = contextvars.ContextVar("const_ignored", default=False)


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
    if "const" in node and not _CONST_IGNORED.get():
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


def schemas_disjoint(a: Any, b: Any, root: Any, kinds: frozenset[str] = _ALL, draft: int = 0,
                     valid: Callable[[Any, Any], bool] | None = None) -> bool:
    """True only when no JSON value of kinds ``kinds`` is valid against both ``a`` and ``b``.

    ``valid(value, schema)`` (jsonschema with the root's references) lets listed values be
    checked against the other side."""
    token = _CONST_IGNORED.set(draft in (3, 4))
    try:
        return _disjoint(a, b, root, kinds, draft, valid)
    finally:
        _CONST_IGNORED.reset(token)


def _disjoint(a: Any, b: Any, root: Any, kinds: frozenset[str], draft: int,
              valid: Callable[[Any, Any], bool] | None) -> bool:
    common = type_atoms(a, root) & type_atoms(b, root) & kinds
    if not common:
        return True
    if _values_disjoint(a, b, root):
        return True
    a, b = resolve_local(a, root), resolve_local(b, root)
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return False
    if valid is not None:
        for x, y in ((a, b), (b, a)):
            values = _values(x)
            if values is not None and len(values) <= 64 and not any(
                    _value_atoms(v) in common and valid(v, y) for v in values):
                return True
    if common == {"string"} and _strings_disjoint(a, b, root, draft):
        return True
    # Beyond this point only objects may be common to both.
    if not common <= {"object"}:
        return False
    return _objects_disjoint(a, b, root)


def kinds_in_draft(node: Any, root: Any, draft: int) -> frozenset[str]:
    """:func:`type_atoms` as ``draft`` reads ``node`` (drafts 3 and 4 have no ``const``)."""
    token = _CONST_IGNORED.set(draft in (3, 4))
    try:
        return type_atoms(node, root)
    finally:
        _CONST_IGNORED.reset(token)


def _strings_disjoint(a: dict[str, Any], b: dict[str, Any], root: Any, draft: int) -> bool:
    from ..patterns.pattern_lang import string_language

    def resolve(ref: str) -> Any:
        target = resolve_local({"$ref": ref}, root)
        return None if isinstance(target, dict) and target.get("$ref") == ref else target

    la, lb = string_language(a, resolve, draft), string_language(b, resolve, draft)
    return la is not None and lb is not None and (la & lb).is_empty() is True


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

