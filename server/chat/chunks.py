"""Chat Completions' shapes: chunks, the ``chat.completion`` body, the cancellation object.

Pure functions from values to dicts, so the wire format is tested without a server.  The shapes
are the contract of ``docs/protocol.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from afm_struct.errors import AfmError
from afm_struct.turn.events import ResponseIdentity
from afm_struct.turn.outputs import FinishReason, Usage

from ..sse import error_body

CHUNK_OBJECT = "chat.completion.chunk"
COMPLETION_OBJECT = "chat.completion"
CANCELLATION_OBJECT = "chat.completion.cancellation"
ID_PREFIX = "chatcmpl-"


def _chunk(ident: ResponseIdentity, choices: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": ident.id, "object": CHUNK_OBJECT, "created": ident.created, "model": ident.model,
            "choices": choices}


def delta_chunk(ident: ResponseIdentity, delta: Mapping[str, Any],
                logprobs: Mapping[str, Any] | None = None,
                extension: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A chunk carrying one delta (content, reasoning_content, tool_calls, role) and no finish;
    ``logprobs`` is the choice's ``{"content": [...], "refusal": null}`` when asked for;
    ``extension``: AFM fields of the choice (the partial value: :func:`partial_fields`)."""
    choice = {"index": 0, "delta": dict(delta),
              "logprobs": dict(logprobs) if logprobs is not None else None, "finish_reason": None}
    if extension:
        choice.update(extension)
    return _chunk(ident, [choice])


def partial_fields(value: Any, call_index: int | None = None) -> dict[str, Any]:
    """The choice's partial-value field (``stream_options.include_partial``): ``afm_partial``,
    the content's value so far, or ``afm_partial_arguments`` (``index``, ``value``) for call
    ``call_index``'s arguments.  On the choice, beside ``delta``: the openai SDK merges every
    delta field chunk into chunk (``accumulate_delta``), and raises on a list of objects
    without ``index``, which a partial value may be; it leaves choice fields alone."""
    if call_index is None:
        return {"afm_partial": value}
    return {"afm_partial_arguments": {"index": call_index, "value": value}}


def finish_chunk(ident: ResponseIdentity, reason: FinishReason) -> dict[str, Any]:
    """The finish chunk: an empty delta and the finish_reason (a StrEnum: JSON writes its string)."""
    return _chunk(ident, [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": reason}])


def usage_dict(usage: Usage) -> dict[str, int]:
    """OpenAI's usage object."""
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens}


def usage_chunk(ident: ResponseIdentity, usage: Usage) -> dict[str, Any]:
    """The separate usage chunk: empty choices and a top-level usage object."""
    return {**_chunk(ident, []), "usage": usage_dict(usage)}


def error_chunk(ident: ResponseIdentity, err: AfmError) -> dict[str, Any]:
    """A mid-stream failure: the message in delta.content (plain clients show it), a top-level
    ``error`` object (careful clients, and the openai SDK, detect it) and finish_reason "error".
    It replaces the finish chunk; usage and profile may follow, then ``[DONE]``."""
    chunk = _chunk(ident, [{"index": 0, "delta": {"content": f"[error] {err.message}"},
                            "logprobs": None, "finish_reason": FinishReason.ERROR}])
    chunk["error"] = error_body(err)
    return chunk


def profile_event(key: str, profile: Mapping[str, Any]) -> dict[str, Any]:
    """The AFM-only profile event: ``{"afm_profile": {...}}`` or ``{"afm_profile_extended": ...}``."""
    return {key: dict(profile)}


def completion_body(ident: ResponseIdentity, *, content: str | None, reasoning_content: str | None,
                    tool_calls: list[dict[str, Any]] | None, finish_reason: FinishReason,
                    usage: Usage, logprobs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A non-streaming ``chat.completion`` (empty channels are left out or null, as OpenAI does;
    ``logprobs`` is the choice's logprobs object when asked for)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning_content:
        message["reasoning_content"] = reasoning_content
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {"id": ident.id, "object": COMPLETION_OBJECT, "created": ident.created,
            "model": ident.model,
            "choices": [{"index": 0, "message": message,
                         "logprobs": dict(logprobs) if logprobs is not None else None,
                         "finish_reason": finish_reason}],
            "usage": usage_dict(usage)}


def cancellation_body(request_id: str, cancelled: bool, err: AfmError | None = None) -> dict[str, Any]:
    """The body of the cancel endpoint (404s also carry the error envelope's ``error``)."""
    body: dict[str, Any] = {"id": request_id, "object": CANCELLATION_OBJECT, "cancelled": cancelled}
    if err is not None:
        body["error"] = error_body(err)
    return body
