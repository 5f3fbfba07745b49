"""Rewrites of value keywords: no-op keywords, formats, patterns llguidance cannot parse, and
the array keywords it lacks (``uniqueItems``, ``contains``) where the arrays are small enough
to list.  Each function takes (rewritten node, original node, context) and returns the new node
or None (unchanged); see :mod:`.rewrites`.
"""

from __future__ import annotations

import itertools
import json
import re._constants as sre
from typing import Any

from ..patterns.pattern_lang import parse_python, pattern_language
from .drafts import asserting_keywords
from .negation import atoms_of, type_schema
from .string_formats import drop_annotation_format
from .string_formats import exact_format as _exact_format

# Keywords llguidance cannot take that constrain only one JSON type: under a ``type`` without
# that type they constrain nothing.
_TYPED_UNSUPPORTED = {
    "uniqueItems": "array", "contains": "array", "minContains": "array", "maxContains": "array",
    "additionalItems": "array", "propertyNames": "object", "minProperties": "object",
    "maxProperties": "object", "patternProperties": "object", "dependentRequired": "object",
    "dependentSchemas": "object", "dependencies": "object"}
_MAX_TUPLES = 400


def noop(node: dict[str, Any], original: dict[str, Any], ctx: Any) -> dict[str, Any] | None:
    """Drop keywords that never reject here: ``uniqueItems: false`` (or with at most one item),
    ``if`` without ``then``/``else`` and those without ``if``, ``minContains``/``maxContains``
    without ``contains``, ``additionalItems`` next to a single ``items``, keywords the declared
    draft does not have, and unsupported keywords of a type the node's ``type`` excludes."""
    drop = set()
    unique = node.get("uniqueItems")
    if unique is False or (unique is True and node.get("maxItems") in (0, 1)):
        drop.add("uniqueItems")
    if "if" in node and "then" not in node and "else" not in node:
        drop.add("if")
    if "if" not in node:
        drop |= {"then", "else"} & set(node)
    if "contains" not in node:
        drop |= {"minContains", "maxContains"} & set(node)
    if "additionalItems" in node and not isinstance(node.get("items"), list):
        drop.add("additionalItems")
    if ctx.draft != 3:  # keywords this draft does not know are annotations (jsonschema ignores them)
        drop |= {k for k in set(node) & set(_TYPED_UNSUPPORTED) | {"if", "then", "else", "contains"}
                 if k in node and k not in asserting_keywords(ctx.draft)}
    declared = node.get("type")
    if isinstance(declared, str | list):
        types = {declared} if isinstance(declared, str) else set(declared)
        drop |= {k for k, t in _TYPED_UNSUPPORTED.items() if k in node and t not in types}
    if not drop:
        return None
    return {k: v for k, v in node.items() if k not in drop}


def unknown_format(node: dict[str, Any], original: dict[str, Any], ctx: Any) -> dict[str, Any] | None:
    """Drop a ``format`` the draft's checker does not assert (an annotation by the spec)."""
    return drop_annotation_format(node, ctx.draft)


def exact_format(node: dict[str, Any], original: dict[str, Any], ctx: Any) -> dict[str, Any] | None:
    """A ``format`` llguidance lacks or enforces loosely → our exact ``pattern`` for it."""
    return _exact_format(node, ctx.draft)


def unparsable(pattern: str) -> bool:
    """True when llguidance's regex syntax cannot take ``pattern`` as Python reads it: a
    lookaround, ``\\Z``, or ``^`` / ``$`` anywhere but at the ends of the top-level branches."""
    if not any(t in pattern for t in ("(?", "\\Z", "^", "$")):
        return False
    parsed = parse_python(pattern)
    if parsed is None:
        return False
    items = list(parsed)
    branches = [list(b) for b in items[0][1][1]] if len(items) == 1 and items[0][0] is sre.BRANCH else [items]

    def inner(seq: list[Any]) -> bool:
        for op, av in seq:
            if op in (sre.ASSERT, sre.ASSERT_NOT) or (op is sre.AT and av is sre.AT_END_STRING):
                return True
            if op is sre.AT:
                return True
            subs = ([list(b) for b in av[1]] if op is sre.BRANCH else [list(av[-1])]
                    if op in (sre.SUBPATTERN, sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT) else [])
            if any(inner(s) for s in subs):
                return True
        return False

    for branch in branches:
        body = branch[:]
        if body and body[0] == (sre.AT, sre.AT_BEGINNING):
            body = body[1:]
        if body and body[-1] == (sre.AT, sre.AT_END):
            body = body[:-1]
        if inner(body):
            return True
    return False


def regular_pattern(node: dict[str, Any], original: dict[str, Any], ctx: Any) -> dict[str, Any] | None:
    """A ``pattern`` llguidance cannot parse whose language is regular → that language as a
    regex it can; a pattern no string matches → the node admits no string."""
    pattern = node.get("pattern")
    if not isinstance(pattern, str) or not unparsable(pattern):
        return None
    lang = pattern_language(pattern)
    if lang is None:
        return None
    if lang.is_empty():
        typed = type_schema(atoms_of(node) - {"string"})
        rest = {k: v for k, v in node.items() if k != "pattern"}
        if typed is None:
            return None
        return {**rest, **typed} if typed["type"] else False  # type: ignore[return-value]
    text = lang.to_pattern()
    if text is None:
        return None
    return {k: (text if k == "pattern" else v) for k, v in node.items()}


def _domain(items: Any, ctx: Any) -> list[Any] | None:
    """The finite set of values ``items`` admits (JSON-distinct), or None if not small/finite."""
    if not isinstance(items, dict):
        return None
    if "const" in items:
        candidates = [items["const"]]
    elif isinstance(items.get("enum"), list):
        candidates = items["enum"]
    elif atoms_of(items) <= {"boolean", "null"}:
        candidates = [v for v, t in ((False, "boolean"), (True, "boolean"), (None, "null"))
                      if t in atoms_of(items)]
    else:
        lo, hi = items.get("minimum"), items.get("maximum")
        if (atoms_of(items) == {"integer"} and isinstance(lo, int) and isinstance(hi, int)
                and not isinstance(lo, bool) and not isinstance(hi, bool) and 0 <= hi - lo < 8):
            candidates = list(range(lo, hi + 1))
        else:
            return None
    if len(candidates) > 8:
        return None
    validator = ctx.validator()
    if validator is None:
        return None
    check = validator.evolve(schema=items)
    out: dict[str, Any] = {}
    for value in candidates:
        if check.is_valid(value):  # JSON equality: 1 and 1.0 are one value
            same = int(value) if isinstance(value, float) and value.is_integer() else value
            out.setdefault(json.dumps(same, sort_keys=True), value)
    return list(out.values())


def unique_items(node: dict[str, Any], original: dict[str, Any], ctx: Any) -> dict[str, Any] | None:
    """``uniqueItems`` over a small finite item domain → the list of every such array."""
    if node.get("uniqueItems") is not True or "prefixItems" in node or isinstance(node.get("items"), list):
        return None
    domain = _domain(original.get("items"), ctx)
    if domain is None:
        return None
    lo = node.get("minItems", 0)
    hi = min(node.get("maxItems", len(domain)), len(domain))
    if not isinstance(lo, int) or not isinstance(hi, int):
        return None
    arrays: list[list[Any]] = []
    for n in range(lo, hi + 1):
        for combo in itertools.permutations(domain, n):
            arrays.append(list(combo))
            if len(arrays) > _MAX_TUPLES:
                return None
    rest = {k: v for k, v in node.items() if k != "uniqueItems"}
    listed: dict[str, Any] = {"enum": arrays} if arrays else {"not": {}}
    others = atoms_of(node) - {"array"}
    if not others:
        if "enum" in rest or "const" in rest:
            return None
        return {**rest, **listed} if arrays else None
    other = type_schema(others)
    if other is None:
        return None
    return {**rest, "allOf": [*rest.get("allOf", []), {"anyOf": [other, listed]}]} if arrays else None


def contains(node: dict[str, Any], original: dict[str, Any], ctx: Any) -> dict[str, Any] | None:
    """``contains`` (with ``minContains``) on arrays of at most a few items → "one of these
    positions matches": ``anyOf`` of tuples with the ``contains`` schema at chosen positions."""
    if "contains" not in node or "maxContains" in node or "prefixItems" in node \
            or isinstance(node.get("items"), list):
        return None
    hi = node.get("maxItems")
    need = node.get("minContains", 1)
    if not isinstance(hi, int) or hi > 6 or not isinstance(need, int) or need < 0:
        return None
    key = "items" if ctx.draft in (3, 4, 6, 7, 2019) else "prefixItems"
    cond = node["contains"]
    branches = []
    for positions in itertools.combinations(range(hi), need):
        if not positions:
            branches = []
            break
        tuple_ = [cond if i in positions else {} for i in range(positions[-1] + 1)]
        branches.append({"minItems": positions[-1] + 1, key: tuple_})
    rest = {k: v for k, v in node.items() if k not in ("contains", "minContains")}
    if not branches and need > 0:
        return {**rest, "allOf": [*rest.get("allOf", []), type_schema(atoms_of(node) - {"array"}) or False]}
    if not branches:
        return rest
    others = type_schema(atoms_of(node) - {"array"})
    arrays = {"anyOf": branches}
    return {**rest, "allOf": [*rest.get("allOf", []), {"anyOf": [others, arrays]} if others else arrays]}
