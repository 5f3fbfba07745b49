"""Rewrites of the logic keywords llguidance lacks: ``not``, ``if``/``then``/``else`` and
``oneOf``, through :mod:`.negation`.  Each function takes (rewritten node, original node,
context) and returns the new node or None (unchanged); see :mod:`.rewrites`.

Negations are always built from the *original* subschema (its meaning is the draft's), and the
positive parts from the rewritten one (which may be narrower, never wider): so a rewritten node
never admits a value the original rejects.
"""

from __future__ import annotations

import json
from typing import Any

from ..patterns.writer import MAX_PATTERN
from .disjoint import kinds_in_draft, schemas_disjoint
from .negation import ATOMS, atoms_of

_MAX_BRANCHES = 12
_GROWTH = 40  # a rewritten oneOf may be at most this many times the original's JSON size,
_SLACK = MAX_PATTERN + 4000  # plus room for one negated pattern (a Unicode class prints long)


def _join(node: dict[str, Any], key: str, extra: list[Any]) -> dict[str, Any]:
    """``node`` without ``key``, with ``extra`` added to its ``allOf`` where ``key`` was (the
    position matters to llguidance: properties come in the order applicators appear)."""
    extra = [e for e in extra if e is not True and e != {}]
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k == key:
            if extra and "allOf" not in node:
                out["allOf"] = extra
        elif k == "allOf":
            out["allOf"] = [*v, *extra]
        else:
            out[k] = v
    return out


def not_positive(node: dict[str, Any], original: dict[str, Any], ctx: Any) -> dict[str, Any] | None:
    """``not S`` → the values S rejects, as keywords llguidance enforces."""
    if "not" not in node:
        return None
    negated = ctx.negator.negate(original.get("not", node["not"]), atoms_of(node), ctx.closed_keys(original))
    if negated is None:
        return None
    return _join(node, "not", [negated])


def if_then_else(node: dict[str, Any], original: dict[str, Any], ctx: Any) -> dict[str, Any] | None:
    """``if I then T else E`` → ``anyOf: [I ∧ T, ¬I ∧ E]`` (a missing branch is ``true``)."""
    if "if" not in node or ("then" not in node and "else" not in node):
        return None
    neg_if = ctx.negator.negate(original["if"], atoms_of(node), ctx.closed_keys(original))
    if neg_if is None:
        return None
    yes = [p for p in (node["if"], node.get("then", True)) if p is not True and p != {}]
    no = [p for p in (neg_if, node.get("else", True)) if p is not True and p != {}]
    branches = [b[0] if len(b) == 1 else {"allOf": b} if b else True for b in (yes, no)]
    branches = [b for b in branches if b is not False]
    if any(b is True for b in branches):
        choice: Any = True
    elif not branches:
        choice = False
    else:
        choice = branches[0] if len(branches) == 1 else {"anyOf": branches}
    out = _join(node, "if", [choice])
    return {k: v for k, v in out.items() if k not in ("then", "else")}


def oneof_disjoint(node: dict[str, Any], original: dict[str, Any], ctx: Any) -> dict[str, Any] | None:
    """``oneOf`` → ``anyOf`` when no value can match two branches (proved on the originals)."""
    branches, source = node.get("oneOf"), original.get("oneOf")
    if not isinstance(branches, list) or not branches or not isinstance(source, list):
        return None
    kinds = atoms_of(node)
    for i, a in enumerate(source):
        for b in source[i + 1:]:
            if not schemas_disjoint(a, b, ctx.root, kinds, ctx.draft, ctx.valid):
                return None
    return _as_any_of(node, branches)


def oneof_exclusive(node: dict[str, Any], original: dict[str, Any], ctx: Any) -> dict[str, Any] | None:
    """``oneOf`` → ``anyOf`` of "branch i and none of the branches that can overlap it"."""
    branches, source = node.get("oneOf"), original.get("oneOf")
    if (not isinstance(branches, list) or not isinstance(source, list) or not branches
            or len(branches) > _MAX_BRANCHES or len(source) != len(branches)):
        return None
    kinds = atoms_of(node)
    keys = ctx.closed_keys(original)
    out: list[Any] = []
    for i, (mine, orig) in enumerate(zip(branches, source, strict=True)):
        mine_kinds = kinds & _kinds(orig, ctx)
        if not mine_kinds:
            continue
        mine_keys = _narrow(keys, ctx.closed_keys(ctx.deref(orig)))
        parts = [mine]
        for j, other in enumerate(source):
            if j == i or schemas_disjoint(orig, other, ctx.root, kinds, ctx.draft, ctx.valid):
                continue
            neg = ctx.negator.negate(other, mine_kinds, mine_keys)
            if neg is None:
                return None
            if neg is False:
                parts = [False]
                break
            parts.append(neg)
        if parts == [False]:
            continue
        out.append(parts[0] if len(parts) == 1 else {"allOf": parts})
    result = _as_any_of(node, out) if out else _join(node, "oneOf", [False])
    if _size(result) > _GROWTH * _size(node) + _SLACK:
        return None
    return result


def _size(schema: Any) -> int:
    return len(json.dumps(schema, ensure_ascii=False))


def _as_any_of(node: dict[str, Any], branches: list[Any]) -> dict[str, Any]:
    if "anyOf" in node:  # both present: wrap this one so neither constraint is lost
        return _join(node, "oneOf", [{"anyOf": branches}])
    return {("anyOf" if k == "oneOf" else k): (branches if k == "oneOf" else v) for k, v in node.items()}


def _kinds(schema: Any, ctx: Any) -> frozenset[str]:
    """The kinds of value ``schema`` may accept (over-approximated; ``enum`` / ``const`` count)."""
    return kinds_in_draft(schema, ctx.root, ctx.draft) & ATOMS


def _narrow(a: frozenset[str] | None, b: frozenset[str] | None) -> frozenset[str] | None:
    if a is None:
        return b
    return a if b is None else a & b
