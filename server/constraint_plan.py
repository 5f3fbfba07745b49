"""A chat or text completion request's output constraint, whichever field asked → one :class:`OutputFormat`.

``response_format`` is read by the chat adapter as before; a constraint field of another
server's dialect (:mod:`server.constraint_fields`), or llama.cpp's schema inside a
``json_object`` format, becomes the same output format, so the core compiles and serves it
without knowing which field asked (:func:`server.structured.plan_structured`).
"""

from __future__ import annotations

import asyncio

from afm_struct.errors import InvalidRequestError
from afm_struct.serving.plan import OutputFormat

from .completions_api.schemas import CompletionRequest
from .constraint_fields import (
    check_response_format_extra,
    check_tool_extra,
    read_constraint_fields,
    response_format_schema,
)
from .schemas import ChatCompletionRequest


def read_request_constraint(body: ChatCompletionRequest | CompletionRequest) -> OutputFormat | None:
    """The dialect constraint of ``body`` (None: ``response_format`` or nothing asks for one);
    400s for refused, malformed or conflicting fields.  Converts grammars: call it off the loop.
    A text completion has the same fields but no tools."""
    fmt = body.response_format
    if fmt is not None:
        check_response_format_extra(fmt)
    body_tools = getattr(body, "tools", None)
    check_tool_extra(body_tools)
    from_format = response_format_schema(fmt)
    asks_json = fmt is not None and fmt.type != "text"
    tools = "tools" if body_tools and getattr(body, "tool_choice", None) != "none" else None
    format_param = "response_format" if asks_json and from_format is None else None
    if tools is not None and fmt is not None and fmt.type == "structural_tag":
        # One mask per request and the tool grammar holds only a JSON answer: refused, not dropped.
        raise InvalidRequestError("response_format (structural_tag) and tools both constrain the output; "
                                  "send one of them, or tool_choice: none", param="response_format",
                                  code="conflicting_constraints")
    found = read_constraint_fields(body.model_extra or {}, response_format=format_param, tools=tools)
    if from_format is not None:
        if found is not None:
            raise InvalidRequestError(f"{from_format.param} and {found.param} both constrain the output; "
                                      "send one of them", param=found.param, code="conflicting_constraints")
        return from_format
    return found


async def dialect_output(body: ChatCompletionRequest | CompletionRequest) -> OutputFormat | None:
    """:func:`read_request_constraint`: off the event loop when extra fields may hold a grammar
    to convert; without them it is a few cheap checks."""
    if body.model_extra:
        return await asyncio.to_thread(read_request_constraint, body)
    return read_request_constraint(body)
