"""Anthropic ``system`` and ``messages`` → the chat-template turns the core renders.

``system`` is a string or a list of text blocks (their ``cache_control`` is accepted and has no
effect: the prefix cache keeps what it keeps).  A message's ``content`` is a string or a list of
blocks: ``text``; ``tool_use`` and ``thinking`` / ``redacted_thinking`` in assistant turns (an
earlier answer passed back); ``tool_result`` in user turns.  Images and documents are refused
with a 400 naming the block (this server serves text models), as is any other block type.
Claude Code also sends ``system`` messages inside ``messages``: they become system turns.

Tool results become ``tool`` turns (named after the call they answer) before the text of the
same user message; thinking passed back rides the assistant turn as ``reasoning_content``
(templates that render reasoning show it; a redacted block carries none and is dropped).  A
conversation must end with a user message: an assistant message last (Anthropic's "prefill")
would be rendered as a whole earlier turn, not continued, so it is refused.
"""

from __future__ import annotations

import json
from typing import Any

from afm_struct.errors import InvalidRequestError

ROLES = ("user", "assistant", "system")
MEDIA_BLOCKS = ("image", "document", "search_result", "container_upload")
# Keys a block may carry besides its own fields; ignored (caching, citations: no effect here).
IGNORED_KEYS = frozenset({"cache_control", "citations"})


def _bad(message: str, param: str, code: str = "invalid_value") -> InvalidRequestError:
    return InvalidRequestError(message, param=param, code=code)


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _string(value: Any, param: str) -> str:
    if not isinstance(value, str):
        raise _bad(f"{param} must be a string", param)
    return value


def text_of(content: Any, param: str) -> str:
    """A string, or the text of a list of ``text`` blocks joined (other blocks: 400)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad(f"{param} must be a string or a list of text blocks", param)
    texts = []
    for j, block in enumerate(content):
        where = f"{param}.{j}"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind in MEDIA_BLOCKS:
            raise _bad(f"{where} is {_article(kind)} {kind} block: this server serves text models; "
                       "send text blocks", f"{where}.type", "unsupported_content")
        if kind != "text":
            raise _bad(f"{where}.type must be 'text' here, not {kind!r}", f"{where}.type")
        texts.append(_string(block.get("text"), f"{where}.text"))
    return "".join(texts)


class TurnBuilder:
    """Template turns from Anthropic messages: tool results become ``tool`` turns named after
    their call; an assistant message is one turn with its text, calls and reasoning."""

    def __init__(self) -> None:
        self.turns: list[dict[str, Any]] = []
        self._names: dict[str, str] = {}  # tool_use id → tool name

    def system(self, text: str) -> None:
        if text:
            self.turns.append({"role": "system", "content": text})

    def user(self, content: Any, where: str) -> None:
        if isinstance(content, str):
            self.turns.append({"role": "user", "content": content})
            return
        texts: list[str] = []
        for j, block in enumerate(_blocks(content, where)):
            at = f"{where}.{j}"
            kind = block.get("type")
            if kind == "tool_result":
                self._flush_user(texts)
                self._tool_result(block, at)
            elif kind == "text":
                texts.append(_string(block.get("text"), f"{at}.text"))
            else:
                _refuse_block(kind, at, "text and tool_result")
        self._flush_user(texts)

    def assistant(self, content: Any, where: str) -> None:
        turn: dict[str, Any] = {"role": "assistant", "content": ""}
        if isinstance(content, str):
            turn["content"] = content
            self.turns.append(turn)
            return
        texts, reasoning, calls = [], [], []
        for j, block in enumerate(_blocks(content, where)):
            at = f"{where}.{j}"
            kind = block.get("type")
            if kind == "text":
                texts.append(_string(block.get("text"), f"{at}.text"))
            elif kind == "thinking":
                reasoning.append(_string(block.get("thinking"), f"{at}.thinking"))
            elif kind == "redacted_thinking":
                continue  # encrypted elsewhere: nothing this server can read
            elif kind == "tool_use":
                call_id = _string(block.get("id"), f"{at}.id")
                name = _string(block.get("name"), f"{at}.name")
                arguments = block.get("input", {})
                if not isinstance(arguments, dict):
                    raise _bad(f"{at}.input must be an object", f"{at}.input")
                self._names[call_id] = name
                calls.append({"id": call_id, "type": "function",
                              "function": {"name": name,
                                           "arguments": json.dumps(arguments, ensure_ascii=False)}})
            else:
                _refuse_block(kind, at, "text, thinking, redacted_thinking and tool_use")
        turn["content"] = "".join(texts)
        if reasoning:
            turn["reasoning_content"] = "".join(reasoning)
        if calls:
            turn["tool_calls"] = calls
        self.turns.append(turn)

    def _flush_user(self, texts: list[str]) -> None:
        if texts:
            self.turns.append({"role": "user", "content": "".join(texts)})
            texts.clear()

    def _tool_result(self, block: dict[str, Any], at: str) -> None:
        call_id = _string(block.get("tool_use_id"), f"{at}.tool_use_id")
        content = block.get("content", "")
        text = text_of(content, f"{at}.content") if content is not None else ""
        if block.get("is_error") is True:
            # The template has no error flag: the model reads it in the result's words.
            text = f"Error: {text}"
        turn = {"role": "tool", "tool_call_id": call_id, "content": text}
        if call_id in self._names:
            turn["name"] = self._names[call_id]
        self.turns.append(turn)


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        raise _bad(f"{where} must be a string or a list of content blocks", where)
    for j, block in enumerate(content):
        if not isinstance(block, dict):
            raise _bad(f"{where}.{j} must be a content block object", f"{where}.{j}")
    return content


def _refuse_block(kind: Any, at: str, allowed: str) -> None:
    if kind in MEDIA_BLOCKS:
        raise _bad(f"{at} is {_article(kind)} {kind} block: this server serves text models; send text blocks",
                   f"{at}.type", "unsupported_content")
    raise _bad(f"{at}.type {kind!r} is not supported here: this message may hold {allowed} blocks",
               f"{at}.type", "unsupported_content")


def system_text(system: str | list[Any] | None) -> str:
    """The top-level ``system`` as one text (blocks joined with a blank line between)."""
    if system is None:
        return ""
    if isinstance(system, str):
        return system
    parts = []
    for j, block in enumerate(system):
        where = f"system.{j}"
        if not isinstance(block, dict) or block.get("type") != "text":
            raise _bad(f"{where} must be a text block", f"{where}.type")
        parts.append(_string(block.get("text"), f"{where}.text"))
    return "\n\n".join(parts)


def message_turns(system: str | list[Any] | None, messages: list[Any]) -> list[dict[str, Any]]:
    """The template turns of ``system`` and ``messages`` (400s name the block's path)."""
    builder = TurnBuilder()
    builder.system(system_text(system))
    if not messages:
        raise _bad("messages must hold at least one message", "messages", "missing_required_parameter")
    for i, message in enumerate(messages):
        where = f"messages.{i}"
        if not isinstance(message, dict):
            raise _bad(f"{where} must be a message object", where)
        role = message.get("role")
        if role not in ROLES:
            raise _bad(f"{where}.role must be 'user' or 'assistant', not {role!r}", f"{where}.role")
        content = message.get("content")
        if content is None:
            raise _bad(f"{where}.content is required", f"{where}.content", "missing_required_parameter")
        if role == "user":
            builder.user(content, f"{where}.content")
        elif role == "assistant":
            builder.assistant(content, f"{where}.content")
        else:
            builder.system(text_of(content, f"{where}.content"))
    last = next((m.get("role") for m in reversed(messages) if m.get("role") != "system"), None)
    if last == "assistant":
        raise _bad("the last message must be a user message: continuing an assistant message "
                   "(prefill) is not supported by this server", f"messages.{len(messages) - 1}.role",
                   "unsupported_value")
    return builder.turns
