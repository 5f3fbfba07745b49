"""Closing a schema's objects: ``additionalProperties: false`` where an object declares its
properties and says nothing about others.

That is OpenAI's strict-mode reading of a schema (xgrammar's ``strict_mode``, llama.cpp's
schema-to-grammar for any schema).  Every instance of the closed schema is an instance of the
original (closing only removes instances) and optional properties stay optional; left open, a
small model fills its budget with invented keys.  Tool arguments are closed this way
(:mod:`afm_struct.tools.grammar`), and so are the objects of a pydantic model given to
:func:`afm_struct.extract` (pydantic writes ``additionalProperties: true`` for a model whose
``extra`` is ``"allow"``, which keeps that object open).
"""

from __future__ import annotations

from typing import Any

# Where a schema holds subschemas: maps of name -> schema, lists of schemas, one schema.
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_ONE_SCHEMA = ("items", "additionalItems", "additionalProperties", "unevaluatedProperties",
               "unevaluatedItems", "not", "if", "then", "else", "contains", "propertyNames",
               "contentSchema")
# Keywords that combine an object's keys from several schemas: closing one part could empty the
# whole (``allOf: [{a}, {b}]`` closed on both sides admits no object with a and b).
_OPEN_WORLD_KEYS = ("allOf", "unevaluatedProperties", "dependentSchemas", "dependencies", "if")


def close_objects(schema: Any) -> Any:
    """A copy of ``schema`` with ``additionalProperties: false`` on every object (at any depth,
    ``$defs`` included) that declares ``properties`` and says nothing about extra ones.

    Objects that say ``additionalProperties`` (true, false or a schema) or
    ``patternProperties`` are kept as they are.  A schema that composes objects (``allOf``,
    ``if``, dependencies, ``unevaluatedProperties``) anywhere is returned unchanged.
    """
    if any(_composes(node) for node in _schemas(schema)):
        return schema
    return _close(schema)


def _children(node: dict[str, Any]) -> list[Any]:
    """The direct subschemas of ``node`` (property names and other data are not schemas)."""
    out: list[Any] = []
    for key in _SCHEMA_MAPS:
        if isinstance(node.get(key), dict):
            out.extend(node[key].values())
    for key in _SCHEMA_LISTS:
        if isinstance(node.get(key), list):
            out.extend(node[key])
    for key in _ONE_SCHEMA:
        value = node.get(key)
        out.extend(value if key == "items" and isinstance(value, list) else [value])
    deps = node.get("dependencies")
    if isinstance(deps, dict):
        out.extend(v for v in deps.values() if isinstance(v, dict))
    return [c for c in out if isinstance(c, dict)]


def _schemas(schema: Any) -> list[dict[str, Any]]:
    """Every schema object in ``schema``, itself included."""
    found: list[dict[str, Any]] = []
    stack = [schema] if isinstance(schema, dict) else []
    while stack:
        node = stack.pop()
        found.append(node)
        stack.extend(_children(node))
    return found


def _composes(node: dict[str, Any]) -> bool:
    return any(k in node for k in _OPEN_WORLD_KEYS)


def _close(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    out = dict(node)
    for key in _SCHEMA_MAPS:
        if isinstance(node.get(key), dict):
            out[key] = {name: _close(sub) for name, sub in node[key].items()}
    for key in _SCHEMA_LISTS:
        if isinstance(node.get(key), list):
            out[key] = [_close(sub) for sub in node[key]]
    for key in _ONE_SCHEMA:
        value = node.get(key)
        if isinstance(value, dict):
            out[key] = _close(value)
        elif key == "items" and isinstance(value, list):
            out[key] = [_close(sub) for sub in value]
    if isinstance(node.get("properties"), dict) and not any(
            k in node for k in ("additionalProperties", "patternProperties")):
        out["additionalProperties"] = False
    return out
