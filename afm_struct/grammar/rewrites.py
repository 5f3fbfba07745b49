"""Semantics-preserving JSON Schema rewrites that bring a schema inside the engines' coverage.

Each rewrite maps a schema node to an equivalent node (same valid instances) built only from
keywords llguidance enforces, or leaves it unchanged when it cannot prove equivalence:

* ``oneof_disjoint``     ``oneOf`` whose branches are pairwise disjoint → ``anyOf``
* ``unknown_format``     a ``format`` the draft's checker does not assert is an annotation → dropped
* ``exact_format``       a ``format`` llguidance lacks or enforces loosely → an exact ``pattern``
  (and ``maxLength``), see :mod:`.formats`
* ``not_simple``         ``not`` of a type, of ``required``, of a bound, ``not {}`` → positive form
* ``dependencies``       ``dependentRequired`` / ``dependencies`` / ``dependentSchemas`` → ``anyOf``
* ``min_max_properties`` redundant or enumerable ``minProperties`` / ``maxProperties``
* ``noop_keyword``       keywords that constrain nothing (``uniqueItems: false``, lone ``if``)
* ``ref_siblings``       keywords next to ``$ref`` in drafts 3–7 (ignored by those drafts) → dropped

All functions are pure: the input is never mutated, the output shares no mutable state with it.
A node reached by a ``$ref`` through a keyword a rewrite removes is left alone (the pointer
would dangle otherwise).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .disjoint import branches_disjoint
from .drafts import draft_of
from .formats import drop_annotation_format, exact_format

ALL_TYPES = ("null", "boolean", "object", "array", "number", "string")

# Keywords whose value is one subschema / a map of subschemas / a list of subschemas.
_ONE = ("additionalProperties", "additionalItems", "not", "if", "then", "else", "contains",
        "propertyNames", "unevaluatedProperties", "unevaluatedItems")
_MAP = ("properties", "patternProperties", "definitions", "$defs", "dependentSchemas")
_LIST = ("allOf", "anyOf", "oneOf", "prefixItems")


@dataclass(frozen=True)
class RewriteResult:
    """The rewritten schema and the names of the rewrites that changed something."""

    schema: Any
    applied: tuple[str, ...]


def _ref_targets(schema: Any) -> set[str]:
    """Every local ``$ref`` pointer in ``schema`` and all its prefixes (``#/a/b`` → ``/a``,
    ``/a/b``): a rewrite at a path in this set would make some pointer dangle."""
    out: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/"):
                parts = ref[1:].split("/")
                out.update("/".join(parts[:i]) for i in range(2, len(parts) + 1))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return out


# ---------------------------------------------------------------- single-node rewrites

def _types_of(node: dict[str, Any]) -> list[str] | None:
    t = node.get("type")
    if isinstance(t, str):
        return [t]
    if isinstance(t, list) and all(isinstance(x, str) for x in t):
        return list(t)
    return None


# not {minLength: n} == a string of length <= n-1, and so on.
_LENGTH_NEGATION = {"minLength": ("string", "maxLength", -1), "maxLength": ("string", "minLength", 1),
                    "minItems": ("array", "maxItems", -1), "maxItems": ("array", "minItems", 1)}


def _atoms(types: list[str]) -> set[str]:
    out = set()
    for t in types:
        out |= {"integer", "nonint"} if t == "number" else {t}
    return out


def _negate(sub: Any, siblings: dict[str, Any], draft: int) -> dict[str, Any] | bool | None:
    """A positive schema equal to ``not sub`` (given the sibling ``type``), or None."""
    if sub is True or sub == {}:
        return False
    if sub is False:
        return True
    if not isinstance(sub, dict):
        return None
    keys = set(sub)
    if keys == {"type"}:
        negated = _types_of(sub)
        if negated is None:
            return None
        # Work in disjoint atoms: "number" is integer + non-integer.
        allowed = _atoms(_types_of(siblings) or list(ALL_TYPES)) - _atoms(negated)
        if "nonint" in allowed and "integer" not in allowed:
            return None  # "a number that is not an integer" has no positive form
        rest = [t for t in ALL_TYPES if t in allowed]
        if "integer" in allowed and "nonint" not in allowed:
            rest.append("integer")
        elif "integer" in allowed:
            rest.append("number")
        if not rest:
            return False
        return {"type": rest[0] if len(rest) == 1 else rest}
    if keys == {"required"} and isinstance(sub["required"], list) and sub["required"]:
        # Non-objects satisfy ``required`` vacuously, so ``not required`` demands an object.
        absent = [{"properties": {name: False}} for name in sub["required"]]
        if len(absent) == 1:
            return {"type": "object", **absent[0]}
        return {"type": "object", "anyOf": absent}
    if len(keys) == 1:
        (key,) = keys
        value = sub[key]
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        if not numeric:
            pass
        elif key in ("minimum", "maximum"):
            if 0 < draft <= 4:
                bound = "maximum" if key == "minimum" else "minimum"
                excl = "exclusiveMaximum" if key == "minimum" else "exclusiveMinimum"
                return {"type": "number", bound: value, excl: True}
            return {"type": "number", "exclusiveMaximum" if key == "minimum" else "exclusiveMinimum": value}
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not 0 < draft <= 4:
            return {"type": "number", "maximum" if key == "exclusiveMinimum" else "minimum": value}
        elif key in _LENGTH_NEGATION and isinstance(value, int) and value >= 0:
            typ, other, step = _LENGTH_NEGATION[key]
            if value + step < 0:
                return False
            return {"type": typ, other: value + step}
    combinator = next(iter(keys)) if len(keys) == 1 else None
    if combinator in ("anyOf", "allOf") and isinstance(sub[combinator], list) and sub[combinator]:
        parts = [_negate(s, {}, draft) for s in sub[combinator]]
        if any(p is None for p in parts):
            return None
        return {"allOf" if combinator == "anyOf" else "anyOf": parts}
    return None


def rewrite_not(node: dict[str, Any], draft: int) -> dict[str, Any] | None:
    """``not`` with a positive equivalent → that equivalent (joined through ``allOf``)."""
    if "not" not in node:
        return None
    positive = _negate(node["not"], node, draft)
    if positive is None:
        return None
    out = {k: v for k, v in node.items() if k != "not"}
    if positive is True:
        return out
    return {**out, "allOf": [*out.get("allOf", []), positive]}


def rewrite_oneof(node: dict[str, Any], draft: int, root: Any) -> dict[str, Any] | None:
    """``oneOf`` → ``anyOf`` when no instance can match two branches."""
    branches = node.get("oneOf")
    if not isinstance(branches, list) or not branches:
        return None
    if len(branches) > 1 and not branches_disjoint(branches, root):
        exclusive = _exclusive_required(branches)
        if exclusive is None:
            return None
        branches = exclusive
    if "anyOf" in node:  # both present: wrap this one so neither constraint is lost
        return _replace_key(node, "oneOf", "allOf", [*node.get("allOf", []), {"anyOf": branches}]) \
            if "allOf" not in node else None
    return _replace_key(node, "oneOf", "anyOf", branches)


_ANNOTATION_KEYS = frozenset({"title", "description", "$comment", "examples"})


def _exclusive_required(branches: list[Any]) -> list[Any] | None:
    """``oneOf`` of bare ``required`` lists → disjoint branches: "R_i present and, for every other
    branch j, some key of R_j − R_i absent".  Non-objects satisfy every bare ``required`` at
    once, so they fail the ``oneOf``: each new branch demands an object.  None if not that shape.
    """
    sets: list[list[str]] = []
    for b in branches:
        if not (isinstance(b, dict) and isinstance(b.get("required"), list) and b["required"]
                and set(b) <= {"required"} | _ANNOTATION_KEYS
                and all(isinstance(x, str) for x in b["required"])):
            return None
        sets.append(b["required"])
    out: list[Any] = []
    for i, req in enumerate(sets):
        conds: list[Any] = []
        for j, other in enumerate(sets):
            if j == i:
                continue
            missing = [x for x in other if x not in req]
            if not missing:  # branch j holds whenever branch i does: i can never be the only one
                conds = [False]
                break
            absent = [{"properties": {x: False}} for x in missing]
            conds.append(absent[0] if len(absent) == 1 else {"anyOf": absent})
        if conds == [False]:
            continue
        out.append({"type": "object", "required": req, **({"allOf": conds} if conds else {})})
    return out or [False]


def _replace_key(node: dict[str, Any], old: str, new: str, value: Any) -> dict[str, Any]:
    """``node`` with ``old`` replaced by ``new: value`` at the same position.

    Position matters to llguidance: properties are generated in the order applicators appear.
    """
    return {(new if k == old else k): (value if k == old else v) for k, v in node.items()}


def rewrite_format(node: dict[str, Any], draft: int) -> dict[str, Any] | None:
    """Drop a ``format`` the draft's checker does not assert (an annotation by the spec)."""
    return drop_annotation_format(node, draft)


def rewrite_exact_format(node: dict[str, Any], draft: int) -> dict[str, Any] | None:
    """A ``format`` llguidance lacks or enforces loosely → our exact ``pattern`` for it."""
    return exact_format(node, draft)


def rewrite_dependencies(node: dict[str, Any], draft: int) -> dict[str, Any] | None:
    """``a`` present ⇒ ``b`` present (or ⇒ schema S): ``anyOf: [a absent, a and b present]``."""
    deps: list[tuple[str, Any]] = []
    # ``dependencies`` is a keyword up to draft 7; 2019-09 split it in two (and ignores it).
    keys = ("dependentRequired", "dependentSchemas") if draft >= 2019 else ("dependencies",)
    if draft == 0:
        keys = ("dependencies", "dependentRequired", "dependentSchemas")
    for key in keys:
        value = node.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            return None
        deps.extend(value.items())
    if not deps:
        return None
    extra: list[Any] = []
    for name, dep in deps:
        absent = {"properties": {name: False}}
        if isinstance(dep, list):
            if not dep:
                continue
            present: Any = {"required": [name, *dep]}
        elif isinstance(dep, dict | bool):
            if dep is True or dep == {}:
                continue
            present = {"required": [name], "allOf": [dep]}
        else:
            return None
        extra.append({"anyOf": [absent, present]})
    out = {k: v for k, v in node.items() if k not in keys}
    if extra:
        out["allOf"] = [*out.get("allOf", []), *extra]
    return out


def rewrite_min_max_properties(node: dict[str, Any], draft: int) -> dict[str, Any] | None:
    """Drop ``min/maxProperties`` implied by ``required`` / a closed property list; turn
    ``minProperties: 1`` over a closed list into ``anyOf`` of single ``required``."""
    lo, hi = node.get("minProperties"), node.get("maxProperties")
    if lo is None and hi is None:
        return None
    props = node.get("properties", {})
    closed = node.get("additionalProperties") is False and not node.get("patternProperties")
    required = set(node.get("required", []))
    out = dict(node)
    changed = False
    if isinstance(lo, int) and (lo <= len(required) or lo <= 0):
        out.pop("minProperties")
        changed = True
    elif lo == 1 and closed and isinstance(props, dict) and props:
        out.pop("minProperties")
        out["allOf"] = [*out.get("allOf", []), {"anyOf": [{"required": [p]} for p in props]}]
        changed = True
    if isinstance(hi, int) and closed and isinstance(props, dict) and hi >= len(props):
        out.pop("maxProperties")
        changed = True
    return out if changed else None


def rewrite_noop(node: dict[str, Any], draft: int) -> dict[str, Any] | None:
    """Drop keywords that never reject: ``uniqueItems: false``, ``if`` with no ``then``/``else``,
    ``additionalItems`` when ``items`` is a single schema, ``contains: true``-like empties."""
    drop = set()
    if node.get("uniqueItems") is False:
        drop.add("uniqueItems")
    if "if" in node and "then" not in node and "else" not in node:
        drop.add("if")
    if "additionalItems" in node and not isinstance(node.get("items"), list):
        drop.add("additionalItems")
    if node.get("uniqueItems") is True and node.get("maxItems") in (0, 1):
        drop.add("uniqueItems")
    if not drop:
        return None
    return {k: v for k, v in node.items() if k not in drop}


# The registry, applied in this order: name -> (function, keywords it removes; a $ref into one
# of them blocks the rewrite).  ``oneof_disjoint`` alone also takes the root (to resolve refs).
_REWRITES: dict[str, tuple[Callable[..., dict[str, Any] | None], tuple[str, ...]]] = {
    "noop_keyword": (rewrite_noop, ("if", "additionalItems")),
    "unknown_format": (rewrite_format, ()),
    "exact_format": (rewrite_exact_format, ()),
    "dependencies": (rewrite_dependencies, ("dependencies", "dependentSchemas")),
    "min_max_properties": (rewrite_min_max_properties, ()),
    "not_simple": (rewrite_not, ("not",)),
    "oneof_disjoint": (rewrite_oneof, ("oneOf",)),
}


# Keys next to a draft ≤ 7 ``$ref`` that still matter: they locate ref targets or set the base URI.
_REF_KEEP = frozenset({"$ref", "$schema", "$id", "id", "definitions", "$defs"})


def rewrite_ref_siblings(node: dict[str, Any], draft: int, path: str,
                         refs: set[str]) -> dict[str, Any] | None:
    """Drafts 3–7 ignore every keyword next to ``$ref``; llguidance intersects them (2019+
    semantics).  Drop them, except keys that hold ref targets or change the base URI."""
    if not (isinstance(node.get("$ref"), str) and draft in (3, 4, 6, 7)):
        return None
    drop = [k for k in node if k not in _REF_KEEP and f"{path}/{k}" not in refs]
    if not drop:
        return None
    return {k: v for k, v in node.items() if k not in drop}


# Every rewrite above needs one of these keywords (or a sibling $ref): most nodes have none.
_TRIGGERS = frozenset({"$ref", "uniqueItems", "if", "additionalItems", "format", "dependencies",
                       "dependentRequired", "dependentSchemas", "minProperties", "maxProperties",
                       "not", "oneOf"})


def _rewrite_node(node: dict[str, Any], path: str, ctx: _Ctx) -> dict[str, Any]:
    if _TRIGGERS.isdisjoint(node):
        return node
    new_ref = rewrite_ref_siblings(node, ctx.draft, path, ctx.refs)
    if new_ref is not None:
        node = new_ref
        ctx.applied.add("ref_siblings")
    for name, (func, removes) in _REWRITES.items():
        if any(f"{path}/{k}" in ctx.refs for k in removes):
            continue
        new = func(node, ctx.draft, ctx.root) if name == "oneof_disjoint" else func(node, ctx.draft)
        if new is not None:
            node = new
            ctx.applied.add(name)
    return node


@dataclass
class _Ctx:
    draft: int
    root: Any
    refs: set[str]
    applied: set[str]


def _walk(node: Any, path: str, ctx: _Ctx) -> Any:
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        sub = f"{path}/{key}"
        if key in _ONE:
            out[key] = _walk(value, sub, ctx)
        elif key in _MAP and isinstance(value, dict):
            out[key] = {k: _walk(v, f"{sub}/{_escape(k)}", ctx) for k, v in value.items()}
        elif key in _LIST and isinstance(value, list):
            out[key] = [_walk(v, f"{sub}/{i}", ctx) for i, v in enumerate(value)]
        elif key == "items":
            out[key] = ([_walk(v, f"{sub}/{i}", ctx) for i, v in enumerate(value)]
                        if isinstance(value, list) else _walk(value, sub, ctx))
        elif key == "dependencies" and isinstance(value, dict):
            out[key] = {k: _walk(v, f"{sub}/{_escape(k)}", ctx) for k, v in value.items()}
        else:  # shared, not copied: no rewrite mutates a value it did not build
            out[key] = value
    return _rewrite_node(out, path, ctx)


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def rewrite_schema(schema: Any) -> RewriteResult:
    """Apply every rewrite bottom-up over all subschemas; ``applied`` names those that fired."""
    if not isinstance(schema, dict):
        return RewriteResult(schema, ())
    # Refs into the root are resolved against the original: disjointness looks through them.
    ctx = _Ctx(draft=draft_of(schema), root=schema, refs=_ref_targets(schema), applied=set())
    out = _walk(schema, "", ctx)
    return RewriteResult(out, tuple(sorted(ctx.applied)))


def canonical_json(value: Any) -> str:
    """Sorted-key, compact JSON: one spelling per schema (cache keys, equality in tests)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
