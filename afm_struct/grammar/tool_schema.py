"""The tool-call grammar entry point: tools → one JSON Schema for ``{"name", "arguments"}``.

Each tool becomes an object branch whose ``name`` is a ``const``; the branches are therefore
disjoint and the whole schema compiles exactly (``anyOf`` of discriminated objects).  The tools
layer wraps this in its own call syntax (e.g. a Lark grammar around ``%json{...}``) or uses it
as the whole output.
"""

from __future__ import annotations

from typing import Any

from ..errors import SchemaError
from .spec import ToolDef


def tool_call_schema(tools: tuple[ToolDef, ...] | list[ToolDef]) -> dict[str, Any]:
    """A schema accepting exactly one call ``{"name": <tool>, "arguments": <its parameters>}``."""
    if not tools:
        raise SchemaError("at least one tool is needed for a tool-call grammar", path="$.tools",
                          param="tools")
    seen: set[str] = set()
    branches: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        if not isinstance(tool.name, str) or not tool.name:
            raise SchemaError("a tool needs a non-empty string name", path=f"$.tools[{i}].function.name",
                              param="tools")
        if tool.name in seen:
            raise SchemaError(f"duplicate tool name {tool.name!r}", path=f"$.tools[{i}].function.name",
                              param="tools")
        seen.add(tool.name)
        where = "#" if len(tools) == 1 else f"#/anyOf/{i}"
        params = _rebase_refs(tool.parameters, f"{where}/properties/arguments")
        branches.append({
            "type": "object",
            "properties": {"name": {"const": tool.name}, "arguments": params},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        })
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def _rebase_refs(node: Any, base: str) -> Any:
    """A copy of ``node`` whose local ``$ref``s (``#/...``) point into its new place ``base``."""
    if isinstance(node, dict):
        out = {k: _rebase_refs(v, base) for k, v in node.items()
               if k not in ("enum", "const", "default", "examples")}
        out.update({k: v for k, v in node.items() if k in ("enum", "const", "default", "examples")})
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#"):
            out["$ref"] = base + ref[1:]
        return out
    if isinstance(node, list):
        return [_rebase_refs(v, base) for v in node]
    return node
