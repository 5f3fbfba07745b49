"""Tools in the prompt: pass them to a template that knows tools, or write them in ourselves.

A template that reads ``tools`` gets the definitions and the history unchanged (assistant call
arguments as objects, which every tool template can serialize).  For a template that knows no
tools (the embedded SmolLM2), the definitions go into the system message in the default
format's words, assistant calls are written back as that format's call text and ``tool``
results become the format's result messages, so a multi-turn loop reads naturally.

Given a ``mark`` (a :class:`~afm_struct.models.user_text.TextMarker`), :func:`render_messages` passes
every string that came from the request through it before writing anything around it, so the
format's own markup stays outside the marked text: only that markup and the template may write
special tokens into the prompt.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from .definitions import Choice, ToolDef
from .formats import FormatTable, ToolFormat


def _arguments_object(arguments: Any) -> Any:
    """Call arguments as an object when they are a JSON object string (as OpenAI sends them)."""
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return arguments
        return value
    return arguments if arguments is not None else {}


def _calls_of(message: dict[str, Any]) -> list[tuple[str, Any]]:
    calls = []
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        calls.append((fn.get("name") or "", _arguments_object(fn.get("arguments"))))
    return calls


def tools_system_text(table: FormatTable, tools: tuple[ToolDef, ...], choice: Choice) -> str:
    """The system-prompt block that lists ``tools`` and says how to call them."""
    lines = "\n".join(json.dumps(t.to_openai()["function"], ensure_ascii=False) for t in tools)
    sentence = table.choice_text.get(choice.kind, "").replace("{name}", choice.name or "")
    return table.system_prompt.replace("{tools}", lines).replace("{choice}", sentence)


def render_call(fmt: ToolFormat, name: str, arguments: Any) -> str:
    """One assistant call written in ``fmt``'s syntax (for history)."""
    body = json.dumps({fmt.name_key: name, fmt.arguments_key: arguments}, ensure_ascii=False)
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    text = fmt.history.call.replace("{call}", body).replace("{name}", name).replace("{arguments}", args)
    if "{rendered}" in text:  # written in the format's own syntax (tag pairs, pythonic)
        from .syntaxes import render_call as render_in_syntax

        rendered = render_in_syntax(fmt, name, arguments if isinstance(arguments, dict) else {})
        text = text.replace("{rendered}", rendered)
    return text


def render_history(fmt: ToolFormat, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages with assistant calls and ``tool`` results as plain text in ``fmt``'s syntax."""
    hist = fmt.history
    out: list[dict[str, Any]] = []
    for msg in messages:
        role = msg.get("role")
        content = msg.get("content") or ""
        if role == "assistant" and msg.get("tool_calls"):
            calls = hist.calls_separator.join(render_call(fmt, n, a) for n, a in _calls_of(msg))
            text = (content + "\n" if content else "") + hist.calls_open + calls + hist.calls_close
            out.append({"role": "assistant", "content": text})
        elif role == "tool":
            text = hist.result.replace("{content}", content)
            prev = out[-1] if out else None
            if prev is not None and prev.get("_tool_results"):
                prev["content"] += "\n" + text  # consecutive results form one message
            else:
                out.append({"role": hist.result_role, "content": text, "_tool_results": True})
        elif out and out[-1].get("_tool_results") and role == out[-1]["role"] and isinstance(content, str):
            # A turn after the results in their role joins them: templates that alternate
            # roles strictly (Gemma's) reject two user turns in a row.
            out[-1]["content"] += "\n\n" + content
        else:
            out.append({k: v for k, v in msg.items() if k not in ("tool_calls", "tool_call_id")}
                       | {"content": content})
    return [{k: v for k, v in m.items() if k != "_tool_results"} for m in out]


def _with_argument_objects(message: dict[str, Any]) -> dict[str, Any]:
    """The message with its calls' JSON argument strings parsed into objects."""
    if not message.get("tool_calls"):
        return message
    return {**message, "tool_calls": [
        {**c, "function": {**(c.get("function") or {}),
                           "arguments": _arguments_object((c.get("function") or {}).get("arguments"))}}
        for c in message["tool_calls"]]}


def _template_tool(tool: ToolDef) -> dict[str, Any]:
    """``tool`` as the template's ``tools`` entry: every field present, since templates index
    them directly (Mistral's writes ``tool.description``, which OpenAI's schema makes optional)."""
    out = tool.to_openai()
    out["function"].setdefault("description", "")
    return out


def render_messages(messages: list[dict[str, Any]], tools: tuple[ToolDef, ...], choice: Choice,
                    fmt: ToolFormat, table: FormatTable, *, knows_tools: bool, mark: Any = None,
                    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """``(messages, tools for the template)`` for the chat template.

    ``tool_choice: none`` leaves the definitions out (no call is possible) but keeps the history.
    ``mark``: a text marker every request string goes through (names, descriptions, schemas,
    contents, arguments, results), before any markup of the format is written around it.
    """
    messages = [_with_argument_objects(m) for m in messages]
    if mark is not None:
        messages = mark.messages(messages)
        tools = tuple(replace(t, name=mark.text(t.name), description=mark.text(t.description),
                              parameters=mark.value(t.parameters)) for t in tools)
        choice = replace(choice, name=mark.text(choice.name) if choice.name else choice.name)
    if knows_tools:
        offered = [_template_tool(t) for t in tools] if tools and choice.kind != "none" else None
        return messages, offered
    out = render_history(fmt, messages)
    if not tools or choice.kind == "none":
        return out, None
    block = tools_system_text(table, tools, choice)
    if out and out[0].get("role") == "system":
        out[0] = {**out[0], "content": (out[0]["content"] + "\n\n" + block).strip()}
    else:
        out.insert(0, {"role": "system", "content": block})
    return out, None
