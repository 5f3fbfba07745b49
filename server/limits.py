"""Bounds on the number of items in a request's lists, checked by pydantic before any item is.

A body of many small objects costs far more than its bytes: 200,000 one-word messages (5.8 MB)
took ~2.5 s of pydantic validation and ~3 s of value checks, holding the GIL that every running
stream needs (a stream beside it stalled for 8.7 s).  A list over its bound is refused at once
(pydantic stops at the length, ~0.1 s for that body), with ``param`` at the list.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

# OpenAI's own bounds: "Expected an array with maximum length 2048" for messages, and "a max
# of 128 functions are supported" for tools.
MAX_MESSAGES = 2048
MAX_TOOLS = 128
# Content parts of one message, tool calls of one message, Responses input items: as messages.
MAX_PARTS = 2048
# Messages, their content parts and tool calls together: the per-list bounds alone would let
# 2,048 messages of 2,048 parts each through (an 8 MB body holds ~300,000 small parts).
MAX_CONVERSATION_ITEMS = 8192

Messages = Field(max_length=MAX_MESSAGES)
Tools = Field(max_length=MAX_TOOLS)
Parts = Field(max_length=MAX_PARTS)


def count_conversation_items(messages: Any) -> int:
    """Messages plus their content parts and tool calls, read from the raw request (before
    validation; a shape that is not a list of objects counts what it can and leaves the rest
    to validation)."""
    if not isinstance(messages, list):
        return 0
    total = len(messages)
    for message in messages:
        if isinstance(message, dict):
            for key in ("content", "tool_calls"):
                if isinstance(message.get(key), list):
                    total += len(message[key])
    return total


def check_conversation_items(messages: Any, param: str = "messages") -> None:
    """Raise ``ValueError`` (pydantic's 400 at ``param``) when ``messages`` holds more than
    :data:`MAX_CONVERSATION_ITEMS` messages, content parts and tool calls together."""
    n = count_conversation_items(messages)
    if n > MAX_CONVERSATION_ITEMS:
        raise ValueError(f"the conversation holds {n:,} messages, content parts and tool calls; "
                         f"at most {MAX_CONVERSATION_ITEMS:,} are read")
