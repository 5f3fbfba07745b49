"""What a ``%json`` leaf of the any-order grammar costs in exactness: objects in schema order.

llguidance's JSON compiler takes an object's declared properties only in the schema's order,
extra keys after them.  Where the any-order translation (:mod:`.any_order`) leaves a subschema
as a ``%json`` leaf, every object inside it keeps that order: in ``property_order="any"`` the
grammar then rejects valid instances written in another order, so it is not exact and the
compile says so (reason ``property_order_fixed``) instead of serving it as ``enforced``.
"""

from __future__ import annotations

from typing import Any

from ..schema.keywords import keyword_types
from ..schema.paths import MISSING, resolve_pointer
from .key_presence import JSON_TYPES, json_types

_VALUES = ("enum", "const", "default", "examples")
_SAME_VALUE = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else")


def holds_ordered_object(schema: Any, root: Any) -> bool:
    """True when some object ``schema`` admits (through its subschemas and local ``$ref``s)
    has two keys whose order llguidance's JSON compiler fixes: a declared (or required) property
    and another, or one next to an extra key (``additionalProperties`` not false, or a
    ``patternProperties`` entry).  Conservative: it may flag an object no instance reaches."""
    seen: set[tuple[str, frozenset[str]]] = set()
    everything = frozenset(JSON_TYPES)
    # (subschema, the types a value it applies to can have): applicators apply to the same
    # value as their parent (a leaf typed ["string", ...] holds no object at its own level).
    stack: list[tuple[Any, frozenset[str]]] = [(schema, everything)]
    while stack:
        node, allowed = stack.pop()
        if isinstance(node, list):
            stack.extend((n, allowed) for n in node)
            continue
        if not isinstance(node, dict):
            continue
        types = allowed & set(json_types(node))
        if "object" in types and _orders_keys(node):
            return True
        ref = node.get("$ref")
        if isinstance(ref, str) and (ref, types) not in seen:
            seen.add((ref, types))
            target = resolve_pointer(root, ref) if ref.startswith("#") else MISSING
            if target is not MISSING:
                stack.append((target, types))
        # Only keywords that apply to the node's types (an array's `properties`, an object's
        # `items` are inert), and definitions (reached through references above).
        for k, v in node.items():
            if k in _VALUES or k in ("definitions", "$defs"):
                continue
            if k in _SAME_VALUE:
                stack.append((v, frozenset(types)))
            elif types & set(keyword_types(k)):
                stack.append((v, everything))
    return False


def _orders_keys(node: dict[str, Any]) -> bool:
    props = node.get("properties", {})
    required = node.get("required", [])
    if not isinstance(props, dict) or not isinstance(required, list):
        return False
    # Required keys come in the order of `required` too, before any extra key.
    declared = {k for k, v in props.items() if v is not False} | {k for k in required if isinstance(k, str)}
    if len(declared) >= 2:
        return True
    extras = node.get("additionalProperties", True) is not False or bool(node.get("patternProperties"))
    return len(declared) == 1 and extras


def has_nested_ids(schema: dict[str, Any]) -> bool:
    """True when a subschema changes the base URI (its ``$ref``s would resolve elsewhere)."""
    stack: list[Any] = [v for k, v in schema.items() if k not in _VALUES]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            for key in ("$id", "id"):
                if isinstance(node.get(key), str) and not node[key].startswith("#"):
                    return True
            stack.extend(v for k, v in node.items() if k not in _VALUES)
    return False
