"""Responses API input → the chat-template turns the core renders.

``input`` is a string (one user turn) or a list of items: messages (``role`` and ``content``,
a string or ``input_text`` / ``output_text`` parts), the ``function_call`` /
``custom_tool_call`` items of an earlier answer with their ``*_output`` items, and ``reasoning``
items passed back.  Each bad item is a 400 naming its path (``input.3.content.0.type``); images,
files and audio are refused (this server serves text models).  ``instructions`` becomes the
system turn in front.  Custom tool calls are rendered as the function call the model makes for
them (arguments ``{"input": ...}``, :mod:`.tools`).
"""

from __future__ import annotations

import json
from typing import Any

from afm_struct.errors import InvalidRequestError

from .bounds import check_item, check_part
from .tools import CUSTOM_INPUT_KEY

MESSAGE_ROLES = ("user", "system", "developer", "assistant")
TEXT_PARTS = {"input_text", "output_text"}
MEDIA_PARTS = {"input_image", "input_file", "input_audio"}
# Item types this server reads; any other (web_search_call, item_reference, ...) is refused.
CALL_TYPES = ("function_call", "custom_tool_call")
OUTPUT_TYPES = ("function_call_output", "custom_tool_call_output")


def _bad(message: str, param: str, code: str = "invalid_value") -> InvalidRequestError:
    return InvalidRequestError(message, param=param, code=code)


def _text(value: Any, param: str) -> str:
    if not isinstance(value, str):
        raise _bad(f"{param} must be a string", param)
    return value


def content_text(content: Any, param: str, *, allowed: set[str]) -> str:
    """A message's ``content``: a string, or its text parts joined (other parts are a 400)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad(f"{param} must be a string or a list of content parts", param)
    texts = []
    for j, part in enumerate(content):
        where = f"{param}.{j}"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in MEDIA_PARTS:
            raise _bad(f"{where} is {kind!r}: this server serves text models; send input_text parts",
                       f"{where}.type", "unsupported_content")
        if kind not in allowed:
            raise _bad(f"{where}.type must be one of {sorted(allowed)}, not {kind!r}", f"{where}.type")
        check_part(part, kind, where)
        texts.append(_text(part.get("text"), f"{where}.text"))
    return "".join(texts)


class TurnBuilder:
    """Accumulates template turns: consecutive calls (and the assistant text before them) make
    one assistant turn; reasoning passed back rides the next assistant turn."""

    def __init__(self) -> None:
        self.turns: list[dict[str, Any]] = []
        self._reasoning: list[str] = []
        self._names: dict[str, str] = {}  # call_id → tool name, for tool turns

    def message(self, role: str, text: str) -> None:
        turn: dict[str, Any] = {"role": "system" if role == "developer" else role, "content": text}
        if role == "assistant":
            self._attach_reasoning(turn)
        self.turns.append(turn)

    def reasoning(self, text: str) -> None:
        self._reasoning.append(text)

    def call(self, call_id: str, name: str, arguments: str) -> None:
        self._names[call_id] = name
        last = self.turns[-1] if self.turns else None
        if last is None or last["role"] != "assistant":
            last = {"role": "assistant", "content": ""}
            self._attach_reasoning(last)
            self.turns.append(last)
        last.setdefault("tool_calls", []).append(
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})

    def output(self, call_id: str, text: str) -> None:
        turn = {"role": "tool", "tool_call_id": call_id, "content": text}
        if call_id in self._names:
            turn["name"] = self._names[call_id]
        self.turns.append(turn)

    def _attach_reasoning(self, turn: dict[str, Any]) -> None:
        if self._reasoning:
            turn["reasoning_content"] = "".join(self._reasoning)
            self._reasoning = []


def input_turns(instructions: str | None, items: str | list[Any] | None) -> list[dict[str, Any]]:
    """The template turns of ``instructions`` and ``input`` (400s name the item's path)."""
    builder = TurnBuilder()
    if instructions:
        builder.message("system", instructions)
    if items is None:
        items = []
    if isinstance(items, str):
        builder.message("user", items)
        return builder.turns
    for i, item in enumerate(items):
        read_item(builder, item, f"input.{i}")
    return builder.turns


def read_item(builder: TurnBuilder, item: Any, where: str) -> None:
    """One input item into ``builder`` (400 naming ``where`` for what cannot be read)."""
    if not isinstance(item, dict):
        raise _bad(f"{where} must be an object (a message or an item)", where)
    kind = item.get("type", "message" if "role" in item else None)
    if isinstance(kind, str) and kind in ("message", *CALL_TYPES, *OUTPUT_TYPES, "reasoning"):
        check_item(item, kind, where)
    if kind == "message":
        role = item.get("role")
        if role not in MESSAGE_ROLES:
            raise _bad(f"{where}.role must be one of {', '.join(MESSAGE_ROLES)}, not {role!r}",
                       f"{where}.role")
        allowed = TEXT_PARTS | {"refusal"} if role == "assistant" else {"input_text"}
        content = item.get("content")
        if role == "assistant" and isinstance(content, list):
            for j, part in enumerate(content):
                if isinstance(part, dict) and part.get("type") == "refusal":
                    check_part(part, "refusal", f"{where}.content.{j}")
            content = [{"type": "output_text", "text": p.get("refusal")}
                       if isinstance(p, dict) and p.get("type") == "refusal" else p for p in content]
        builder.message(role, content_text(content, f"{where}.content", allowed=allowed))
    elif kind in CALL_TYPES:
        call_id = _text(item.get("call_id"), f"{where}.call_id")
        name = _text(item.get("name"), f"{where}.name")
        if kind == "function_call":
            arguments = _text(item.get("arguments", ""), f"{where}.arguments")
        else:
            arguments = json.dumps({CUSTOM_INPUT_KEY: _text(item.get("input"), f"{where}.input")},
                                   ensure_ascii=False)
        builder.call(call_id, name, arguments)
    elif kind in OUTPUT_TYPES:
        call_id = _text(item.get("call_id"), f"{where}.call_id")
        output = item.get("output")
        text = output if isinstance(output, str) else content_text(
            output, f"{where}.output", allowed={"input_text"})
        builder.output(call_id, text)
    elif kind == "reasoning":
        if item.get("encrypted_content"):
            raise _bad(f"{where}.encrypted_content cannot be read here: this server never encrypts "
                       "reasoning; pass back the reasoning item it returned", f"{where}.encrypted_content",
                       "unsupported_value")
        parts = item.get("content") or []
        if not isinstance(parts, list):
            raise _bad(f"{where}.content must be a list of reasoning_text parts", f"{where}.content")
        builder.reasoning(content_text(parts, f"{where}.content", allowed={"reasoning_text"}))
    else:
        raise _bad(f"{where}.type {kind!r} is not supported here: send messages, function_call, "
                   "function_call_output, custom_tool_call, custom_tool_call_output or reasoning "
                   "items", f"{where}.type", "unsupported_value")
