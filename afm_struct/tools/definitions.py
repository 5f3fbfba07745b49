"""Tool definitions and ``tool_choice`` → checked :class:`ToolDef`s and one :class:`Choice`.

The one place a request's tools are checked (400s naming the request path of the bad value).
The checks are protocol-neutral: :func:`check_tools` takes :class:`ToolSpec`s, each a tool as
the request declared it and where it sits (``tools.0.function`` in Chat Completions' nested
shape, ``tools.0`` in the Responses API's flat one), and :func:`check_choice` a :class:`Choice`.
:func:`parse_tools` / :func:`parse_choice` read OpenAI's chat shape (the wire dicts
``{"type": "function", "function": {...}}``, objects with the same attributes such as the
server's pydantic models, or values parsed already, which pass through) into those.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidRequestError, UnknownToolError
from ..grammar.closer.literal_budget import check_forced_runs
from ..grammar.schema.check import check_schema
from ..grammar.spec import NO_PARAMETERS, ToolDef


@dataclass(frozen=True)
class Choice:
    """``tool_choice`` normalized: ``kind`` in none/auto/required/function, ``name`` for function."""

    kind: str = "auto"
    name: str | None = None


@dataclass(frozen=True)
class ToolSpec:
    """A function tool as the request declared it, not checked yet: ``parameters`` as sent
    (None: none declared), and ``where``, the request path of the object holding ``name`` and
    ``parameters`` (errors name ``<where>.name``, ``<where>.parameters``)."""

    name: Any
    where: str
    description: str = ""
    parameters: Any = None
    strict: bool = False
    input_grammar: str = ""  # a custom tool's Lark grammar over its input (ToolDef.input_grammar)


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(key, default)
    value = getattr(obj, key, default)
    return default if value is None else value


def _plain(value: Any) -> Any:
    """pydantic models → dicts (schemas may arrive as models or dicts)."""
    dump = getattr(value, "model_dump", None)
    return dump(exclude_none=True) if callable(dump) else value


def shown(path: str) -> str:
    """A dotted request path as messages write it: ``tools.0.function`` → ``tools[0].function``."""
    return re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", path)


def parse_tools(tools: Any) -> tuple[ToolDef, ...]:
    """Tool definitions from a Chat Completions ``tools`` list (400 on a malformed or duplicate
    tool); :class:`ToolDef`s pass through (named as a whole by ``tools``)."""
    specs: list[ToolSpec | ToolDef] = []
    for i, tool in enumerate(tools or ()):
        if isinstance(tool, ToolDef):
            specs.append(tool)
            continue
        kind = _get(tool, "type", "function")
        fn = _get(tool, "function")
        if kind != "function" or fn is None:
            raise InvalidRequestError(f"tools[{i}] must be {{'type': 'function', 'function': {{...}}}}",
                                      param=f"tools.{i}")
        specs.append(ToolSpec(name=_get(fn, "name"), where=f"tools.{i}.function",
                              description=_get(fn, "description", "") or "",
                              parameters=_plain(_get(fn, "parameters")),
                              strict=bool(_get(fn, "strict", False))))
    return check_tools(specs)


def check_tools(specs: Sequence[ToolSpec | ToolDef]) -> tuple[ToolDef, ...]:
    """Check tools declared by any protocol and return them as :class:`ToolDef`s: a non-empty
    name, no two of one name, ``parameters`` a JSON Schema of an arguments object (400s naming
    the tool's path).  Checks each schema (slow for big ones: call it off the event loop)."""
    out: list[ToolDef] = []
    seen: set[str] = set()
    for spec in specs:
        if isinstance(spec, ToolDef):
            if spec.name in seen:
                raise InvalidRequestError(f"tools has two functions named {spec.name!r}", param="tools")
            seen.add(spec.name)
            out.append(spec)
            continue
        out.append(_checked(spec, seen))
    return tuple(out)


def _checked(spec: ToolSpec, seen: set[str]) -> ToolDef:
    name = spec.name
    if not isinstance(name, str) or not name:
        raise InvalidRequestError(f"{shown(spec.where)}.name must be a non-empty string",
                                  param=f"{spec.where}.name")
    if name in seen:
        raise InvalidRequestError(f"tools has two functions named {name!r}", param=f"{spec.where}.name")
    seen.add(name)
    params = spec.parameters
    has_params = params is not None
    if params is None or (isinstance(params, dict) and not params):
        params = dict(NO_PARAMETERS)  # no parameters: the call's arguments are exactly "{}"
    where = f"{spec.where}.parameters"
    if not isinstance(params, dict | bool):
        raise InvalidRequestError(f"{shown(where)} must be a JSON Schema object", param=where)
    # Checked here, where the request path is known (the compile checks it again, cached,
    # but would name response_format); a tool whose arguments can never be valid is a
    # request error, strict or not.
    params = object_arguments(params, where)
    check_schema(params, param=where, prefix=f"$.{shown(where)}")
    if spec.strict:  # a non-strict tool is served without the forced run
        check_forced_runs(params, param=where, prefix=f"$.{shown(where)}")
    return ToolDef(name=name, description=spec.description, parameters=params, strict=spec.strict,
                   has_parameters=has_params, input_grammar=spec.input_grammar)


def object_arguments(params: dict[str, Any] | bool, where: str) -> dict[str, Any] | bool:
    """``params`` (declared at request path ``where``) read as the schema of an arguments
    *object* (OpenAI requires one: a call's arguments are named parameters, and clients parse
    them as a JSON object).

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
            f"{shown(where)} must describe a JSON object (a call's arguments "
            f"are an object of named parameters), not type {json.dumps(kind)}; put the value in "
            "a property: {\"type\": \"object\", \"properties\": {\"value\": ...}}",
            param=where, code="invalid_value")
    if kind == "object":
        return params
    return {**params, "type": "object"}


def parse_choice(choice: Any, tools: tuple[ToolDef, ...]) -> Choice:
    """Chat Completions ``tool_choice`` → :class:`Choice`, checked against ``tools``; default
    ``auto`` with tools, ``none`` without."""
    if choice is None:
        return Choice("auto" if tools else "none")
    if isinstance(choice, Choice):
        return check_choice(choice, tools)
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise InvalidRequestError(f"tool_choice {choice!r} is not one of none, auto, required "
                                      "or a {'type': 'function', ...} object", param="tool_choice")
        return check_choice(Choice(choice), tools)
    fn = _get(choice, "function")
    name = _get(fn, "name") if fn is not None else None
    if not isinstance(name, str):
        raise InvalidRequestError("tool_choice must name a function: "
                                  "{'type': 'function', 'function': {'name': ...}}", param="tool_choice")
    return check_choice(Choice("function", name), tools)


def check_choice(choice: Choice, tools: tuple[ToolDef, ...], *, param: str = "tool_choice") -> Choice:
    """``choice`` when ``tools`` allow it (``param``: where the request holds it): a call
    needs tools, and a named function must be one of them."""
    if choice.kind in ("auto", "required"):
        if not tools:
            raise InvalidRequestError(f"tool_choice {choice.kind!r} needs a non-empty tools list",
                                      param=param)
        return choice
    if choice.kind != "function":
        if choice.kind != "none":
            raise InvalidRequestError(f"tool_choice {choice.kind!r} is not one of none, auto, "
                                      "required or a function", param=param)
        return choice
    name = choice.name
    if not isinstance(name, str):
        raise InvalidRequestError("tool_choice must name a function", param=param)
    if not tools:
        raise InvalidRequestError(f"tool_choice names function {name!r} but tools is empty; "
                                  "send the function in tools", param=param)
    if name not in {t.name for t in tools}:
        raise UnknownToolError(f"tool_choice names function {name!r}, which is not in tools "
                               f"({', '.join(t.name for t in tools)})", param=param)
    return choice
