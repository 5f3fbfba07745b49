"""Bounds on the number of items in a request's lists, checked by pydantic before any item is.

A body of many small objects costs far more than its bytes: 200,000 one-word messages (5.8 MB)
took ~2.5 s of pydantic validation and ~3 s of value checks, holding the GIL that every running
stream needs (a stream beside it stalled for 8.7 s).  A list over its bound is refused at once
(pydantic stops at the length, ~0.1 s for that body), with ``param`` at the list.
"""

from __future__ import annotations

from pydantic import Field

# OpenAI's own bounds: "Expected an array with maximum length 2048" for messages, and "a max
# of 128 functions are supported" for tools.
MAX_MESSAGES = 2048
MAX_TOOLS = 128
# Content parts of one message, tool calls of one message, Responses input items: as messages.
MAX_PARTS = 2048

Messages = Field(max_length=MAX_MESSAGES)
Tools = Field(max_length=MAX_TOOLS)
Parts = Field(max_length=MAX_PARTS)
