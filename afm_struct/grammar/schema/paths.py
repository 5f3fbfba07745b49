"""Where things are in a JSON Schema: local ``$ref`` pointers and the JSON paths errors name.

Shared by the admission checks (``schema_check``), the emptiness analysis (``satisfiability``),
the rewrites and the any-order translation; it imports nothing from them.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

# What ``resolve_pointer`` returns for a pointer that leads nowhere (None is a valid target).
MISSING: Any = object()
# Keywords whose values are data, not subschemas: nothing inside them is a ``$ref``.
DATA_KEYWORDS = ("enum", "const", "default", "examples")


def json_path(parts: Any) -> str:
    """``["properties", "a b", 0]`` → ``$.properties['a b'][0]``."""
    out = "$"
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and part.replace("_", "").replace("-", "").isalnum() and "-" not in part:
            out += f".{part}"
        else:
            out += f"[{json.dumps(part)}]"
    return out


def resolve_pointer(schema: Any, ref: str) -> Any:
    """The target of a local ref ``#`` / ``#/a/b`` in ``schema``, or :data:`MISSING`."""
    if not ref.startswith("#") or (len(ref) > 1 and not ref.startswith("#/")):
        return MISSING
    node = schema
    for part in ref[2:].split("/") if len(ref) > 1 else []:
        part = unquote(part).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return MISSING
    return node


def escape_pointer_part(key: str) -> str:
    """One JSON pointer component (``a/b`` → ``a~1b``)."""
    return key.replace("~", "~0").replace("/", "~1")


def may_refer(text: str | None) -> bool:
    """False when ``text``, a schema as ``json.dumps`` wrote it, holds no ``"$ref"`` string, so no
    ``$ref`` key anywhere: the walks that look for references can be skipped (their result is
    "none").  True when there is no text, or some ``"$ref"`` (a key, or a string: the walk decides)."""
    return text is None or '"$ref"' in text


def local_refs_resolve(schema: dict[str, Any]) -> bool:
    """True when every ``$ref`` is a JSON pointer into ``schema`` that resolves and no nested
    ``$id``/``id`` changes the base URI (the common case, no registry needed)."""
    stack: list[tuple[Any, bool]] = [(schema, True)]
    while stack:
        node, is_root = stack.pop()
        if isinstance(node, dict):
            if not is_root and isinstance(node.get("$id", node.get("id")), str):
                return False
            ref = node.get("$ref")
            if isinstance(ref, str) and resolve_pointer(schema, ref) is MISSING:
                return False
            stack.extend((v, False) for k, v in node.items() if k not in DATA_KEYWORDS)
        elif isinstance(node, list):
            stack.extend((v, False) for v in node)
    return True
