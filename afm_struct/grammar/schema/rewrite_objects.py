"""Rewrites of object keywords llguidance lacks or takes only in some shapes: ``$ref``
siblings (drafts 3–7), ``dependencies``, overlapping ``patternProperties``, ``propertyNames``,
and ``min/maxProperties`` over optional properties.  Each function takes (rewritten node,
original node, context) and returns the new node or None (unchanged); see :mod:`.rewrites`.
"""

from __future__ import annotations

import itertools
from typing import Any

from ..patterns.pattern_lang import pattern_language, string_language
from ..patterns.regular import ANYTHING, Lang, one_of
from .rewrite_values import unparsable

# Keys next to a draft ≤ 7 ``$ref`` that still matter: they locate ref targets or set the base URI.
_REF_KEEP = frozenset({"$ref", "$schema", "$id", "id", "definitions", "$defs"})
_MAX_BRANCHES = 64
_MAX_PATTERNS = 4  # overlapping patterns split into at most 2**4 - 1 regions


def ref_siblings(node: dict[str, Any], original: dict[str, Any], ctx: Any) -> dict[str, Any] | None:
    """Drafts 3–7 ignore every keyword next to ``$ref``; llguidance intersects them (2019+
    semantics).  Drop them, except keys that hold ref targets or change the base URI."""
    if not (isinstance(node.get("$ref"), str) and ctx.draft in (3, 4, 6, 7)):
        return None
    path = ctx.path
    drop = [k for k in node if k not in _REF_KEEP and (path is None or f"{path}/{k}" not in ctx.refs)]
    if not drop:
        return None
    return {k: v for k, v in node.items() if k not in drop}


def dependencies(node: dict[str, Any], original: dict[str, Any], ctx: Any) -> dict[str, Any] | None:
    """``a`` present ⇒ ``b`` present (or ⇒ schema S): ``anyOf: [a absent, a and b present]``."""
    draft = ctx.draft
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


def _languages(patterns: list[str]) -> list[Lang] | None:
    langs = [pattern_language(p) for p in patterns]
    return None if any(x is None for x in langs) else langs  # type: ignore[return-value]


def pattern_properties(node: dict[str, Any], original: dict[str, Any], ctx: Any) -> dict[str, Any] | None:
    """``patternProperties`` whose regexes overlap (llguidance wants them disjoint) or that it
    cannot parse → one anchored regex per region of keys matched by the same patterns, whose
    schema is the ``allOf`` of theirs."""
    pp = node.get("patternProperties")
    if not isinstance(pp, dict) or not pp:
        return None
    patterns = list(pp)
    if len(patterns) == 1 and not unparsable(patterns[0]):
        return None
    langs = _languages(patterns)
    if langs is None:
        return None
    overlap = any((a & b).is_empty() is not True for a, b in itertools.combinations(langs, 2))
    if not overlap and not any(unparsable(p) for p in patterns):
        return None
    if overlap and len(patterns) > _MAX_PATTERNS:
        return None
    regions: dict[str, Any] = {}
    for mask in range(1, 2 ** len(patterns)) if overlap else [1 << i for i in range(len(patterns))]:
        lang = ANYTHING
        for i, sub in enumerate(langs):
            lang = lang & (sub if mask >> i & 1 else ~sub)
        empty = lang.is_empty()
        if empty is None:
            return None
        if empty:
            continue
        text = lang.to_pattern()
        if text is None:
            return None
        schemas = [pp[p] for i, p in enumerate(patterns) if mask >> i & 1]
        regions[text] = schemas[0] if len(schemas) == 1 else {"allOf": schemas}
    return {k: (regions if k == "patternProperties" else v) for k, v in node.items()}


def property_names(node: dict[str, Any], original: dict[str, Any], ctx: Any) -> dict[str, Any] | None:
    """``propertyNames`` of a string schema (pattern, lengths, enum, ``not``, refs...) → declared
    names it rejects become ``false``, each ``patternProperties`` regex is narrowed to the names
    it accepts, and the other keys get one more regex (accepted names, minus the declared and
    patterned ones) carrying ``additionalProperties``, which becomes ``false``."""
    names = original.get("propertyNames")
    if "propertyNames" not in node:
        return None
    rest = {k: v for k, v in node.items() if k != "propertyNames"}
    if names is True or names == {}:
        return rest
    lang = string_language(names, ctx.resolve, ctx.draft)
    if lang is None:
        return None
    check = ctx.validator()
    if check is None:
        return None
    check = check.evolve(schema=names)
    props = node.get("properties", {})
    pp = node.get("patternProperties", {})
    if not isinstance(props, dict) or not isinstance(pp, dict):
        return None
    new_props = {k: (v if check.is_valid(k) else False) for k, v in props.items()}
    langs = _languages(list(pp))
    if langs is None:
        return None
    new_pp: dict[str, Any] = {}
    for pattern, sub_lang in zip(pp, langs, strict=True):
        narrowed = sub_lang & lang
        if narrowed.is_empty():
            continue
        text = narrowed.to_pattern()
        if text is None:
            return None
        new_pp[text] = pp[pattern]
    extra = node.get("additionalProperties", True)
    if extra is not False:
        others = lang & ~one_of(props)
        for sub_lang in langs:
            others = others & ~sub_lang
        empty = others.is_empty()
        if empty is None:
            return None
        if not empty:
            text = others.to_pattern()
            if text is None:
                return None
            new_pp[text] = extra
    out = dict(rest)
    if props:
        out["properties"] = new_props
    out["patternProperties"] = new_pp
    out["additionalProperties"] = False
    if not new_pp:
        del out["patternProperties"]
    return out


# "No object": the counts bind objects only (``false`` here also refused every other value).
_NOT_OBJECT = {"type": ["array", "boolean", "null", "number", "string"]}


def min_max_properties(node: dict[str, Any], original: dict[str, Any], ctx: Any) -> dict[str, Any] | None:
    """``minProperties`` / ``maxProperties`` → what llguidance takes: nothing when implied; over
    a closed list, "some k of these present" / "some of these absent"; otherwise one ``anyOf``
    branch per set of optional properties present, each with every listed key required or
    ``false`` (then llguidance counts the rest itself)."""
    lo, hi = node.get("minProperties", 0), node.get("maxProperties")
    if "minProperties" not in node and hi is None:
        return None
    if not isinstance(lo, int) or not (hi is None or isinstance(hi, int)):
        return None
    props = node.get("properties", {})
    required = node.get("required", [])
    if not isinstance(props, dict) or not isinstance(required, list):
        return None
    req = set(required)
    optional = [k for k, v in props.items() if k not in req and v is not False]
    open_ = node.get("additionalProperties", True) is not False or bool(node.get("patternProperties"))
    possible = len(req | set(optional)) if not open_ and req <= set(props) else None
    out = {k: v for k, v in node.items() if k not in ("minProperties", "maxProperties")}
    need_lo = lo > len(req)
    need_hi = hi is not None and (possible is None or hi < possible)
    if not optional:  # every listed key required or false: llguidance counts the rest itself
        kept = {**out, **({"minProperties": lo} if need_lo else {}),
                **({"maxProperties": hi} if need_hi else {})}
        return None if kept == node else kept
    if not need_lo and not need_hi:
        return out
    if not open_ and possible is None:
        return None
    conds: list[Any] = []
    n = len(optional)
    if not open_:
        if need_lo:
            k = lo - len(req)
            if k > n:
                return {**out, "allOf": [*out.get("allOf", []), _NOT_OBJECT]}
            subsets = list(itertools.combinations(optional, k))
            if len(subsets) > _MAX_BRANCHES:
                return None
            conds.append({"anyOf": [{"required": list(s)} for s in subsets]})
        if need_hi:
            assert hi is not None
            k = n - (hi - len(req))
            if k > n:
                return {**out, "allOf": [*out.get("allOf", []), _NOT_OBJECT]}
            subsets = list(itertools.combinations(optional, k))
            if len(subsets) > _MAX_BRANCHES:
                return None
            conds.append({"anyOf": [{"properties": {o: False for o in s}} for s in subsets]})
    else:
        if 2 ** n > _MAX_BRANCHES:
            return None
        branches = []
        for r in range(n + 1):
            for present in itertools.combinations(optional, r):
                count = len(req) + r
                if hi is not None and count > hi:
                    continue
                branch: dict[str, Any] = {"required": sorted(req | set(present)),
                                          "properties": {o: False for o in optional if o not in present}}
                if count < lo:
                    branch["minProperties"] = lo
                if hi is not None:
                    branch["maxProperties"] = hi
                branches.append(branch)
        conds.append({"anyOf": branches} if branches else _NOT_OBJECT)
    return {**out, "allOf": [*out.get("allOf", []), *conds]}

