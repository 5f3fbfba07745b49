"""OpenAI ``tools`` / ``tool_choice`` values → :class:`ToolDef`s and one normalized :class:`Choice`.

The one place a request's tools are checked (400s naming the parameter).  Accepts the wire
dicts (``{"type": "function", "function": {...}}``), objects with the same attributes (the
server's pydantic models) or values parsed already (a :class:`ToolDef`, a :class:`Choice`),
which pass through, so a caller that parsed once can hand the result on without a second check.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidRequestError, UnknownToolError
from ..grammar.literal_budget import check_forced_runs
from ..grammar.schema_check import check_schema
from ..grammar.spec import NO_PARAMETERS, ToolDef


@dataclass(frozen=True)
class Choice:
    """``tool_choice`` normalized: ``kind`` in none/auto/required/function, ``name`` for function."""

    kind: str = "auto"
    name: str | None = None


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(key, default)
    value = getattr(obj, key, default)
    return default if value is None else value


def _plain(value: Any) -> Any:
    """pydantic models → dicts (schemas may arrive as models or dicts)."""
    dump = getattr(value, "model_dump", None)
    return dump(exclude_none=True) if callable(dump) else value


def parse_tools(tools: Any) -> tuple[ToolDef, ...]:
    """Tool definitions from the request's ``tools`` (400 on a malformed or duplicate tool)."""
    out: list[ToolDef] = []
    seen: set[str] = set()
    for i, tool in enumerate(tools or ()):
        if isinstance(tool, ToolDef):
            if tool.name in seen:
                raise InvalidRequestError(f"tools has two functions named {tool.name!r}", param="tools")
            seen.add(tool.name)
            out.append(tool)
            continue
        kind = _get(tool, "type", "function")
        fn = _get(tool, "function")
        if kind != "function" or fn is None:
            raise InvalidRequestError(f"tools[{i}] must be {{'type': 'function', 'function': {{...}}}}",
                                      param=f"tools.{i}")
        name = _get(fn, "name")
        if not isinstance(name, str) or not name:
            raise InvalidRequestError(f"tools[{i}].function.name must be a non-empty string",
                                      param=f"tools.{i}.function.name")
        if name in seen:
            raise InvalidRequestError(f"tools has two functions named {name!r}",
                                      param=f"tools.{i}.function.name")
        seen.add(name)
        params = _plain(_get(fn, "parameters"))
        has_params = params is not None
        if params is None or (isinstance(params, dict) and not params):
            params = dict(NO_PARAMETERS)  # no parameters: the call's arguments are exactly "{}"
        where = f"tools.{i}.function.parameters"
        if not isinstance(params, dict | bool):
            raise InvalidRequestError(f"tools[{i}].function.parameters must be a JSON Schema object",
                                      param=where)
        # Checked here, where the request path is known (the compile checks it again, cached,
        # but would name response_format); a tool whose arguments can never be valid is a
        # request error, strict or not.
        params = object_arguments(params, i)
        check_schema(params, param=where, prefix=f"$.tools[{i}].function.parameters")
        if _get(fn, "strict", False):  # a non-strict tool is served without the forced run
            check_forced_runs(params, param=where, prefix=f"$.tools[{i}].function.parameters")
        out.append(ToolDef(name=name, description=_get(fn, "description", "") or "",
                           parameters=params, strict=bool(_get(fn, "strict", False)),
                           has_parameters=has_params))
    return tuple(out)


def object_arguments(params: dict[str, Any] | bool, index: int) -> dict[str, Any] | bool:
    """``params`` read as the schema of an arguments *object* (OpenAI requires one: a call's
    arguments are named parameters, and clients parse them as a JSON object).

    A schema whose ``type`` excludes objects is a 400 (it made arguments like ``"Hello"``); a
    type list is narrowed to ``"object"``; a schema without ``type`` gets it (keywords are
    conjunctive: this keeps exactly its object instances).  ``true`` stays (any object).
    """
    if not isinstance(params, dict):
        return params
    kind = params.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if kind is not None and "object" not in kinds:
        raise InvalidRequestError(
            f"tools[{index}].function.parameters must describe a JSON object (a call's arguments "
            f"are an object of named parameters), not type {json.dumps(kind)}; put the value in "
            "a property: {\"type\": \"object\", \"properties\": {\"value\": ...}}",
            param=f"tools.{index}.function.parameters", code="invalid_value")
    if kind == "object":
        return params
    return {**params, "type": "object"}


def parse_choice(choice: Any, tools: tuple[ToolDef, ...]) -> Choice:
    """``tool_choice`` → :class:`Choice`; default ``auto`` with tools, ``none`` without."""
    if choice is None:
        return Choice("auto" if tools else "none")
    if isinstance(choice, Choice):
        if choice.kind == "function":
            return parse_choice({"type": "function", "function": {"name": choice.name}}, tools)
        return parse_choice(choice.kind, tools)
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise InvalidRequestError(f"tool_choice {choice!r} is not one of none, auto, required "
                                      "or a {'type': 'function', ...} object", param="tool_choice")
        if choice != "none" and not tools:
            raise InvalidRequestError(f"tool_choice {choice!r} needs a non-empty tools list",
                                      param="tool_choice")
        return Choice(choice)
    fn = _get(choice, "function")
    name = _get(fn, "name") if fn is not None else None
    if not isinstance(name, str):
        raise InvalidRequestError("tool_choice must name a function: "
                                  "{'type': 'function', 'function': {'name': ...}}", param="tool_choice")
    if not tools:
        raise InvalidRequestError(f"tool_choice names function {name!r} but tools is empty; "
                                  "send the function in tools", param="tool_choice")
    if name not in {t.name for t in tools}:
        raise UnknownToolError(f"tool_choice names function {name!r}, which is not in tools "
                               f"({', '.join(t.name for t in tools)})", param="tool_choice")
    return Choice("function", name)
