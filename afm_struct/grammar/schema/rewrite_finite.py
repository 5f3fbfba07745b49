"""A node whose valid values are listed: ``enum`` / ``const`` (its own, or an ``allOf`` member's)
next to keywords llguidance lacks → the listed values jsonschema accepts against the whole node.

The node's meaning is a conjunction, and one conjunct admits only the listed values; so the
node admits exactly those of them that pass every other conjunct.  jsonschema (the reference,
format-asserting, with the node's references resolved in the original document) decides each
value; where it cannot judge, the rewrite leaves the node alone.  Only nodes holding a keyword
llguidance does not take as written (``not``, ``if``, ``patternProperties`` next to ``not``...)
are rewritten: elsewhere the engine enforces the conjunction itself.
"""

from __future__ import annotations

from typing import Any

from .keywords import TABLE

_MAX_VALUES = 256
# Keywords whose values are data, not subschemas: never searched for unsupported keywords.
_DATA = frozenset({"enum", "const", "default", "examples", "required", "type", "title", "description"})


def finite_values(node: dict[str, Any], original: dict[str, Any], ctx: Any) -> Any:
    """``enum``/``const`` ∧ other keywords → ``enum`` of the listed values that hold for all."""
    if ctx.draft == 3:
        return None
    values = _listed(original, ctx)
    if values is None or not _engine_lacks(original):
        return None
    if ctx.path and any(r == ctx.path or r.startswith(ctx.path + "/") for r in ctx.refs):
        return None  # a reference elsewhere points into this node: it must stay
    if ctx.path != "" and _sets_base(ctx.root):
        return None  # checked alone, the node's references could resolve against another base
    kept: list[Any] = []
    for value in values:
        verdict = ctx.accepts(value, original)
        if verdict is None:
            return None
        if verdict:
            kept.append(value)
    return {"enum": kept} if kept else False


def _listed(node: dict[str, Any], ctx: Any) -> list[Any] | None:
    """The values one conjunct of ``node`` lists (its ``const``/``enum``, or an ``allOf``
    member's, followed through references), or None."""
    candidates = [node]
    if isinstance(node.get("allOf"), list):
        candidates += [ctx.deref(sub) for sub in node["allOf"]]
    for cand in candidates:
        if not isinstance(cand, dict):
            continue
        if "const" in cand:
            return [cand["const"]]
        enum = cand.get("enum")
        if isinstance(enum, list) and len(enum) <= _MAX_VALUES:
            return enum
    return None


def _engine_lacks(schema: Any) -> bool:
    """Whether ``schema`` (without following references) holds a keyword llguidance does not
    take as written."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            for key, value in node.items():
                kw = TABLE.get(key)
                if kw is not None and kw.llguidance != "native" and key not in ("$ref", "pattern", "format"):
                    return True
                if key not in _DATA:
                    stack.append(value)
    return False


def _sets_base(root: Any) -> bool:
    """True when a subschema of ``root`` (not the root itself) sets a base URI."""
    stack: list[Any] = [v for k, v in root.items() if k not in _DATA] if isinstance(root, dict) else []
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            if any(isinstance(node.get(k), str) and not node[k].startswith("#") for k in ("$id", "id")):
                return True
            stack.extend(v for k, v in node.items() if k not in _DATA)
    return False
