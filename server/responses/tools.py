"""Responses API tools and ``tool_choice`` → the plan's checked tools and :class:`Choice`.

Function tools are flat (``{"type": "function", "name", "parameters", "strict"}``; ``strict``
defaults to true, as OpenAI's Responses API has it) and are checked by the one tool check,
:func:`afm_struct.tools.check_tools`, at ``tools.N``.

Custom tools (``{"type": "custom", "name", "format"}``) take one string, their ``input``.  The
core knows function tools only, so a custom tool is served as a function whose arguments are
``{"input": <string>}``: the model's call goes through the same prompt, grammar and router as
any call, and the encoder shows the string as the call's ``input``.  The string is free text
for the ``text`` format and follows the grammar for ``{"type": "grammar", "syntax": "regex"}``
(a JSON Schema ``pattern``, anchored: the whole input matches, enforced inside the JSON string
with its escapes).  A Lark grammar (``syntax: "lark"``) constrains the raw input too: the tool
grammar holds it rewritten to the JSON escaping of what it matches
(:mod:`afm_struct.tools.lark_input`); what that rewrite does not support is a 400 naming
``tools.N.format.definition``.

Hosted tools (``web_search``, ``file_search``, ``computer_use_preview``, ``code_interpreter``,
``image_generation``, ``mcp``, ...) and tool ``namespace`` groups (Codex CLI's multi-agent tools)
are tools this server cannot run or does not serve: they are left out of the tool set, and the
response names them in ``X-AFM-Ignored-Tools`` (an agent harness sends them on every turn; a
refusal would stop it).  A ``tool_choice`` naming one is still a 400.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from afm_struct.errors import InvalidRequestError
from afm_struct.grammar.closer.lark_budget import check_grammar_budgets, check_regex_budget
from afm_struct.grammar.spec import ToolDef
from afm_struct.tools.definitions import Choice, ToolSpec, check_choice, check_tools
from afm_struct.tools.lark_input import LarkInputError, json_string_rules

from .bounds import check_keys

CUSTOM_INPUT_KEY = "input"
# The fields each tool type has; any other is refused by name (nothing is silently ignored).
TOOL_KEYS = {"function": ("type", "name", "description", "parameters", "strict"),
             "custom": ("type", "name", "description", "format")}
FORMAT_KEYS = frozenset({"type", "syntax", "definition"})
# The keys of tool_choice objects (and of each tool an allowed_tools choice lists): they are
# echoed, so nothing else may ride along.
CHOICE_KEYS = {"function": frozenset({"type", "name"}), "custom": frozenset({"type", "name"}),
               "allowed_tools": frozenset({"type", "mode", "tools"})}
CHOICE_TOOL_KEYS = frozenset({"type", "name"})


@dataclass(frozen=True)
class DeclaredTools:
    """The request's tools, checked: ``defs`` in request order, the names of custom tools
    (their calls are shown as ``custom_tool_call`` items) and the tools echoed in the response."""

    defs: tuple[ToolDef, ...]
    custom: frozenset[str]
    echo: list[dict[str, Any]]
    # The hosted tools and namespaces left out (by name, or by type when they have none).
    ignored: tuple[str, ...] = ()


def custom_parameters(fmt: Any, where: str) -> tuple[dict[str, Any], str, str]:
    """The arguments schema standing for a custom tool's ``format`` (at ``where``), the words
    telling the model what its input is, and its Lark grammar (``""`` for other formats)."""
    string: dict[str, Any] = {"type": "string"}
    hint = "Its input is free text."
    if fmt is not None and not isinstance(fmt, dict):
        raise InvalidRequestError(f"{where} must be an object", param=where)
    if fmt is not None:
        check_keys(fmt, FORMAT_KEYS, where, "a custom tool's format")
    kind = (fmt or {}).get("type", "text")
    if kind == "grammar":
        syntax = fmt.get("syntax")
        definition = fmt.get("definition")
        if syntax not in ("regex", "lark"):
            raise InvalidRequestError(f"{where}.syntax must be 'lark' or 'regex', not {syntax!r}",
                                      param=f"{where}.syntax")
        if not isinstance(definition, str) or not definition:
            raise InvalidRequestError(f"{where}.definition must be a non-empty "
                                      + ("Lark grammar" if syntax == "lark" else "regular expression"),
                                      param=f"{where}.definition")
        if syntax == "lark":
            try:
                json_string_rules(definition, "check_")
            except LarkInputError as exc:
                raise InvalidRequestError(f"{where}.definition: " + exc.reason, param=f"{where}.definition",
                                          code="unsupported_value") from None
            check_grammar_budgets(definition, param=f"{where}.definition")
            return schema_of(string), f"Its input must follow this Lark grammar:\n{definition}", definition
        check_regex_budget(definition, param=f"{where}.definition")
        string["pattern"] = f"^(?:{definition})$"
        hint = f"Its input must match the regular expression {definition}"
    elif kind != "text":
        raise InvalidRequestError(f"{where}.type must be 'text' or 'grammar', not {kind!r}",
                                  param=f"{where}.type")
    return schema_of(string), hint, ""


def schema_of(string: dict[str, Any]) -> dict[str, Any]:
    """The arguments schema of a custom tool whose input is ``string``."""
    return {"type": "object", "properties": {CUSTOM_INPUT_KEY: string},
            "required": [CUSTOM_INPUT_KEY], "additionalProperties": False}


def read_tools(tools: list[Any] | None) -> DeclaredTools:
    """Check ``tools`` (400s naming ``tools.N...``); slow for big schemas: off the event loop."""
    specs: list[ToolSpec] = []
    custom: set[str] = set()
    echo: list[dict[str, Any]] = []
    ignored: list[str] = []
    for i, tool in enumerate(tools or ()):
        where = f"tools.{i}"
        if not isinstance(tool, dict):
            raise InvalidRequestError(f"{where} must be a tool object", param=where)
        kind = tool.get("type")
        for key in tool:
            if kind in TOOL_KEYS and key not in TOOL_KEYS[kind]:
                raise InvalidRequestError(f"unknown parameter {where}.{key} for a {kind} tool",
                                          param=f"{where}.{key}", code="unknown_parameter")
        name = tool.get("name")
        description = tool.get("description") or ""
        if kind == "function":
            strict = tool.get("strict")
            strict = True if strict is None else strict
            if not isinstance(strict, bool):
                raise InvalidRequestError(f"{where}.strict must be a boolean", param=f"{where}.strict")
            specs.append(ToolSpec(name=name, where=where, description=description,
                                  parameters=tool.get("parameters"), strict=strict))
            echo.append({"type": "function", "name": name, "description": description or None,
                         "parameters": tool.get("parameters"), "strict": strict})
        elif kind == "custom":
            schema, hint, lark = custom_parameters(tool.get("format"), f"{where}.format")
            words = f"{description}\n{hint}" if description else hint
            specs.append(ToolSpec(name=name, where=where, description=words, parameters=schema,
                                  strict=True, input_grammar=lark))
            if isinstance(name, str):
                custom.add(name)
            echo.append({"type": "custom", "name": name, "description": description or None,
                         "format": tool.get("format") or {"type": "text"}})
        elif isinstance(kind, str) and kind:
            ignored.append(name if isinstance(name, str) and name else kind)
        else:
            raise InvalidRequestError(f"{where}.type must name a tool type (function or custom)",
                                      param=f"{where}.type")
    return DeclaredTools(check_tools(specs), frozenset(custom), echo, tuple(ignored))


def read_choice(choice: Any, declared: DeclaredTools) -> tuple[Choice, tuple[ToolDef, ...]]:
    """``tool_choice`` → the plan's :class:`Choice` and the tools it may call
    (``allowed_tools`` narrows them to its list; 400s name ``tool_choice...``)."""
    defs = declared.defs
    if choice is None:
        return Choice("auto" if defs else "none"), defs
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise InvalidRequestError(f"tool_choice {choice!r} is not one of none, auto, required or "
                                      "a tool object", param="tool_choice")
        return check_choice(Choice(choice), defs), defs
    if not isinstance(choice, dict):
        raise InvalidRequestError("tool_choice must be a string or an object", param="tool_choice")
    kind = choice.get("type")
    if kind in CHOICE_KEYS:
        check_keys(choice, CHOICE_KEYS[kind], "tool_choice", f"a tool_choice of type {kind}")
    if kind in ("function", "custom"):
        name = choice.get("name")
        if not isinstance(name, str):
            raise InvalidRequestError("tool_choice.name must name a tool", param="tool_choice.name")
        if name in {t.name for t in defs} and (name in declared.custom) != (kind == "custom"):
            raise InvalidRequestError(f"tool_choice names {kind} {name!r}, but that tool is not a "
                                      f"{kind} tool", param="tool_choice.type")
        return check_choice(Choice("function", name), defs, param="tool_choice.name"), defs
    if kind == "allowed_tools":
        mode = choice.get("mode", "auto")
        if mode not in ("auto", "required"):
            raise InvalidRequestError(f"tool_choice.mode must be 'auto' or 'required', not {mode!r}",
                                      param="tool_choice.mode")
        listed = choice.get("tools")
        if not isinstance(listed, list) or not listed:
            raise InvalidRequestError("tool_choice.tools must list the tools allowed",
                                      param="tool_choice.tools")
        if len(listed) > max(len(defs), 1):  # it is echoed: no repeats beyond the tools
            raise InvalidRequestError(f"tool_choice.tools lists {len(listed):,} tools, more than the "
                                      f"{len(defs)} in tools", param="tool_choice.tools")
        names = []
        for j, ref in enumerate(listed):
            if isinstance(ref, dict):
                check_keys(ref, CHOICE_TOOL_KEYS, f"tool_choice.tools.{j}", "an allowed tool")
            name = ref.get("name") if isinstance(ref, dict) else None
            if name not in {t.name for t in defs}:
                raise InvalidRequestError(f"tool_choice.tools[{j}] names {name!r}, which is not in tools",
                                          param=f"tool_choice.tools.{j}.name", code="unknown_tool")
            names.append(name)
        allowed = tuple(t for t in defs if t.name in names)
        return check_choice(Choice(mode), allowed), allowed
    raise InvalidRequestError(f"tool_choice.type {kind!r} is not supported here: send none, auto, "
                              "required, a function or custom tool, or allowed_tools",
                              param="tool_choice.type", code="unsupported_value")
