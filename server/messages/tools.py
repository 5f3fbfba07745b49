"""Anthropic ``tools`` and ``tool_choice`` → the plan's checked tools and :class:`Choice`.

A client tool is ``{"name", "description", "input_schema", "strict"}`` (``type: "custom"`` or no
type); it goes through the one tool check, :func:`afm_struct.tools.check_tools`, at ``tools.N``
(its schema's errors name ``tools.N.input_schema``).  ``strict`` (default false, as Anthropic
has it) asks for exact enforcement, reported by the downgrade header when it runs best-effort.

Tools with another ``type`` are Anthropic's hosted or versioned tools (``web_search_*``,
``web_fetch_*``, ``code_execution_*``, ``computer_*``, ``bash_*``, ``text_editor_*``, ``memory_*``,
...): this server cannot run them and does not know their schemas, so they are left out of the
tool set, and their names go back in the ``X-AFM-Ignored-Tools`` response header
(:mod:`server.notes`): a client that sends them (agent harnesses do, on every turn) is served
with the tools it can use.

``tool_choice``: ``auto``, ``any`` (a call is required), ``tool`` (that tool), ``none``;
``disable_parallel_tool_use: true`` allows one call per turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from afm_struct.errors import InvalidRequestError
from afm_struct.grammar.spec import ToolDef
from afm_struct.tools.definitions import Choice, ToolSpec, check_choice, check_tools

CLIENT_TYPES = (None, "custom")
TOOL_KEYS = frozenset({"type", "name", "description", "input_schema", "strict", "cache_control"})
CHOICES = {"auto": "auto", "any": "required", "tool": "function", "none": "none"}
CHOICE_KEYS = frozenset({"type", "name", "disable_parallel_tool_use"})


@dataclass(frozen=True)
class DeclaredTools:
    """The request's client tools, checked, and the names of the hosted tools left out."""

    defs: tuple[ToolDef, ...]
    ignored: tuple[str, ...]


def read_tools(tools: list[Any] | None) -> DeclaredTools:
    """Check ``tools`` (400s naming ``tools.N...``); slow for big schemas: off the event loop."""
    specs: list[ToolSpec] = []
    ignored: list[str] = []
    for i, tool in enumerate(tools or ()):
        where = f"tools.{i}"
        if not isinstance(tool, dict):
            raise InvalidRequestError(f"{where} must be a tool object", param=where)
        kind = tool.get("type")
        if kind not in CLIENT_TYPES:
            if not isinstance(kind, str):
                raise InvalidRequestError(f"{where}.type must be a string", param=f"{where}.type")
            name = tool.get("name")
            ignored.append(name if isinstance(name, str) and name else kind)
            continue
        for key in tool:
            if key not in TOOL_KEYS:
                raise InvalidRequestError(f"unknown parameter {where}.{key} for a client tool",
                                          param=f"{where}.{key}", code="unknown_parameter")
        if "input_schema" not in tool:
            raise InvalidRequestError(f"{where}.input_schema is required: the JSON Schema of the "
                                      "tool's input", param=f"{where}.input_schema",
                                      code="missing_required_parameter")
        strict = tool.get("strict", False)
        if not isinstance(strict, bool):
            raise InvalidRequestError(f"{where}.strict must be a boolean", param=f"{where}.strict")
        description = tool.get("description") or ""
        if not isinstance(description, str):
            raise InvalidRequestError(f"{where}.description must be a string", param=f"{where}.description")
        specs.append(ToolSpec(name=tool.get("name"), where=where, description=description,
                           parameters=tool["input_schema"], strict=strict))
    return DeclaredTools(_renamed(specs), tuple(ignored))


def _renamed(specs: list[ToolSpec]) -> tuple[ToolDef, ...]:
    """``check_tools`` with its ``<where>.parameters`` paths read as Anthropic's ``input_schema``."""
    try:
        return check_tools(specs)
    except InvalidRequestError as err:
        if err.param and ".parameters" in err.param:
            err.param = err.param.replace(".parameters", ".input_schema", 1)
            err.message = err.message.replace(".parameters", ".input_schema")
        raise


def read_choice(choice: dict[str, Any] | None, declared: DeclaredTools) -> tuple[Choice, bool | None]:
    """``tool_choice`` → the plan's :class:`Choice` and whether calls may run in parallel
    (None: the default, yes); 400s name ``tool_choice...``."""
    defs = declared.defs
    if choice is None:
        return Choice("auto" if defs else "none"), None
    for key in choice:
        if key not in CHOICE_KEYS:
            raise InvalidRequestError(f"unknown parameter tool_choice.{key}", param=f"tool_choice.{key}",
                                      code="unknown_parameter")
    kind = choice.get("type")
    if kind not in CHOICES:
        raise InvalidRequestError(f"tool_choice.type must be auto, any, tool or none, not {kind!r}",
                                  param="tool_choice.type")
    parallel_off = choice.get("disable_parallel_tool_use")
    if parallel_off is not None and not isinstance(parallel_off, bool):
        raise InvalidRequestError("tool_choice.disable_parallel_tool_use must be a boolean",
                                  param="tool_choice.disable_parallel_tool_use")
    parallel = None if parallel_off is None else not parallel_off
    if kind == "none":
        return Choice("none"), parallel
    if kind == "tool":
        name = choice.get("name")
        if not isinstance(name, str):
            raise InvalidRequestError("tool_choice.name must name a tool", param="tool_choice.name",
                                      code="missing_required_parameter")
        if name in declared.ignored:
            raise InvalidRequestError(f"tool_choice names {name!r}, a hosted tool this server cannot "
                                      "run; name a client tool (one with an input_schema)",
                                      param="tool_choice.name", code="unsupported_value")
        return check_choice(Choice("function", name), defs, param="tool_choice.name"), parallel
    if kind == "auto" and not defs:
        return Choice("none"), parallel  # every tool sent was hosted: nothing to call
    if not defs and declared.ignored:
        raise InvalidRequestError(f"tool_choice {kind!r} needs a client tool: the tools sent are hosted "
                                  f"tools this server cannot run ({', '.join(declared.ignored)})",
                                  param="tool_choice")
    return check_choice(Choice(CHOICES[kind]), defs), parallel
