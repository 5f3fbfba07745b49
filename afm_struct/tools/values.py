"""Argument values written outside JSON: typed by each parameter's schema.

Tag-pair syntaxes (Qwen3-Coder's ``<parameter=…>``, GLM's ``<arg_value>``) write a string
parameter's value raw and any other value as JSON, as the models' own templates do.  Which one a
parameter takes is read from its schema: a parameter that can only be a string is written raw;
anything else (numbers, objects, unions that admit more than strings, no schema at all) as JSON.
The writer and the reader use the same rule, so a value round-trips exactly.
"""

from __future__ import annotations

import json
from typing import Any


def _types_of(schema: Any) -> set[str] | None:
    """The JSON types ``schema`` admits, or None when it does not say (any type)."""
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return {_type_name(schema["const"])}
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return {_type_name(v) for v in schema["enum"]}
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list) and kind:
        return {k for k in kind if isinstance(k, str)}
    branches = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(branches, list) and branches:
        out: set[str] = set()
        for branch in branches:
            kinds = _types_of(branch)
            if kinds is None:
                return None
            out |= kinds
        return out
    return None


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def is_raw_string(schema: Any) -> bool:
    """True when the parameter can only be a string: its value is written raw, not as JSON."""
    return _types_of(schema) == {"string"}


def arguments_object(parameters: Any) -> Any:
    """The arguments schema with a root ``$ref`` to a local definition followed (``{"$ref":
    "#/definitions/x", "definitions": {...}}``, as schema generators write a root model), its
    definitions kept for the references inside; else ``parameters`` itself.  The syntaxes that
    write parameters one by one read the declared ones here: from the bare root, a ``$ref``
    schema declared none, and took any name."""
    schema = parameters
    for _ in range(8):  # a chain of references, not a cycle
        ref = schema.get("$ref") if isinstance(schema, dict) else None
        target = _local(parameters, ref) if isinstance(ref, str) else None
        if not isinstance(target, dict):
            break
        defs = {k: parameters[k] for k in ("$defs", "definitions", "x-guidance") if k in parameters}
        schema = {**{k: v for k, v in schema.items() if k != "$ref"}, **target, **defs}
    return schema


def _local(root: dict[str, Any], ref: str) -> Any:
    """The part of ``root`` a local JSON pointer (``#/definitions/x``) names, or None."""
    if not ref.startswith("#/"):
        return None
    node: Any = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def property_schemas(parameters: Any) -> dict[str, Any]:
    """The declared properties of an arguments schema (empty when it declares none)."""
    parameters = arguments_object(parameters)
    if not isinstance(parameters, dict):
        return {}
    props = parameters.get("properties")
    return dict(props) if isinstance(props, dict) else {}


def render_value(schema: Any, value: Any) -> str:
    """``value`` as a tag-pair syntax writes it: raw when the schema says string, else JSON."""
    if is_raw_string(schema) and isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def read_value(schema: Any, text: str) -> Any:
    """The value written as ``text`` (the inverse of :func:`render_value`).

    A non-string parameter that does not parse as JSON is kept as the string it is (a model
    writing free text where a number was asked is reported, not lost).
    """
    if is_raw_string(schema):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text
