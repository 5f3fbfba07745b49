"""The Responses API's shapes: the response object, its output items, usage, errors.

Pure functions from values to dicts (the contract of docs/protocol.md, "Responses API"), so
the wire is tested without a server.
"""

from __future__ import annotations

from typing import Any

from afm_struct.errors import AfmError
from afm_struct.turn.events import Entries, ResponseIdentity
from afm_struct.turn.outputs import Usage

from ..logprob_routing import entry_dict

RESPONSE_OBJECT = "response"
MESSAGE_PREFIX, REASONING_PREFIX = "msg_", "rs_"
FUNCTION_CALL_PREFIX, CUSTOM_CALL_PREFIX = "fc_", "ctc_"


def usage_dict(usage: Usage, reasoning_tokens: int = 0) -> dict[str, Any]:
    """The Responses API's usage object (cached input tokens: the prefix cache's)."""
    return {"input_tokens": usage.prompt_tokens,
            "input_tokens_details": {"cached_tokens": usage.cached_tokens, "cache_write_tokens": 0},
            "output_tokens": usage.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": usage.total_tokens}


def logprob_list(entries: Entries | None) -> list[dict[str, Any]]:
    """Token entries in OpenAI's shape (``token``, ``logprob``, ``bytes``, ``top_logprobs``)."""
    return [entry_dict(e) for e in entries or ()]


def output_text(text: str, logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """An ``output_text`` content part."""
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}


def message_item(item_id: str, status: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    """An assistant ``message`` output item."""
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": parts}


def reasoning_text(text: str) -> dict[str, Any]:
    """A ``reasoning_text`` content part."""
    return {"type": "reasoning_text", "text": text}


def reasoning_item(item_id: str, status: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    """A ``reasoning`` output item: the thinking text as content, no summary."""
    return {"id": item_id, "type": "reasoning", "status": status, "summary": [], "content": parts}


def function_call_item(item_id: str, status: str, call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """A ``function_call`` output item."""
    return {"id": item_id, "type": "function_call", "status": status, "call_id": call_id,
            "name": name, "arguments": arguments}


def custom_call_item(item_id: str, status: str, call_id: str, name: str, text: str) -> dict[str, Any]:
    """A ``custom_tool_call`` output item (its ``input``: the string the call carried)."""
    return {"id": item_id, "type": "custom_tool_call", "status": status, "call_id": call_id,
            "name": name, "input": text}


def error_object(err: AfmError) -> dict[str, Any]:
    """``response.error``: the failure's message, and OpenAI's code for its kind (the ``error``
    event before it carries this server's own code)."""
    return {"code": "invalid_prompt" if err.status < 500 else "server_error", "message": err.message}


def response_object(ident: ResponseIdentity, echo: dict[str, Any], *, status: str,
                    output: list[dict[str, Any]], usage: dict[str, Any] | None = None,
                    error: dict[str, Any] | None = None, incomplete_reason: str | None = None,
                    completed_at: int | None = None) -> dict[str, Any]:
    """The ``response`` object: identity, status, output and usage, then the echoed settings."""
    return {"id": ident.id, "object": RESPONSE_OBJECT, "created_at": ident.created,
            "status": status, "completed_at": completed_at, "error": error,
            "incomplete_details": {"reason": incomplete_reason} if incomplete_reason else None,
            "output": output, "usage": usage, **echo, "model": ident.model}


# The settings a response object states that a record stored before they were stated lacks
# (or holds as null): the defaults that ran then.  Fields the spec lets be null are not here.
IN_EFFECT_DEFAULTS: dict[str, Any] = {"temperature": 1.0, "top_p": 1.0, "top_logprobs": 0,
                                      "presence_penalty": 0.0, "frequency_penalty": 0.0,
                                      "truncation": "disabled"}


def with_defaults(response: dict[str, Any]) -> dict[str, Any]:
    """``response`` with each setting the spec requires as a value that is missing or null set
    to the default that ran, and ``max_tool_calls`` (nullable) present."""
    out = dict(response)
    for key, default in IN_EFFECT_DEFAULTS.items():
        if out.get(key) is None:
            out[key] = default
    out.setdefault("max_tool_calls", None)
    return out
