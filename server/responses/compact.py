"""``POST /v1/responses/compact``: a conversation compacted by the served model.

The conversation is the request's ``input``, after the stored conversation
``previous_response_id`` names (either or both; one is required, and so is ``model``).  The
served model writes a summary of it (an ordinary non-streamed run with :data:`INSTRUCTIONS`,
greedy, ``truncation: "auto"`` so a conversation over the context still compacts from its most
recent turns).  The compacted output keeps the user's messages as they were (as OpenAI's does)
and puts the summary after them as one assistant message; it is plain items this server takes
as ``input`` again (OpenAI's opaque ``compaction`` item carries encrypted state this server has
none of).  The result is stored like a response (same id, same tenant): a later request with
``previous_response_id`` set to it continues from the compacted conversation alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, field_validator

from afm_struct.errors import InvalidRequestError

from ..limits import Parts, check_conversation_items
from .shapes import MESSAGE_PREFIX, message_item, output_text

COMPACTION_OBJECT = "response.compaction"
INSTRUCTIONS = ("You compact conversations. Summarize the conversation so far so that it can be "
                "continued from your summary alone: the user's goals and requests, the facts, "
                "decisions and results so far (tool calls and their outputs included), and what "
                "is still open. Write only the summary.")
PROMPT = "Write the summary of the conversation above now."


class CompactRequest(BaseModel):
    """``POST /v1/responses/compact`` (the Open Responses ``CompactResponseMethodPublicBody``)."""

    model_config = ConfigDict(allow_inf_nan=False, extra="allow")

    model: str | None = None
    input: str | Annotated[list[Any], Parts] | None = None
    previous_response_id: str | None = None
    instructions: str | None = None

    @field_validator("input", mode="before")
    @classmethod
    def _bounded(cls, value: Any) -> Any:
        check_conversation_items(value, "input")
        return value


def check_compact(body: CompactRequest) -> None:
    """400 for an unknown field, a missing ``model``, or nothing to compact."""
    for name in body.model_extra or {}:
        raise InvalidRequestError(f"unknown parameter {name!r}: compact takes model, input, "
                                  "previous_response_id and instructions", param=name,
                                  code="unknown_parameter")
    if body.model is None:
        raise InvalidRequestError("model is required", param="model", code="missing_required_parameter")
    empty = body.input is None or (isinstance(body.input, list) and not body.input)
    if empty and body.previous_response_id is None:
        raise InvalidRequestError("input or previous_response_id is required: the conversation to "
                                  "compact", param="input", code="missing_required_parameter")


def user_messages(items: list[dict[str, Any]], new_id: Callable[[str], str]) -> list[dict[str, Any]]:
    """The user's messages among ``items`` (typed items, as the store keeps them), kept, with
    the ``id`` and ``status`` an output item has (made when the input item had none)."""
    return [{**item, "id": item.get("id") or new_id(MESSAGE_PREFIX),
             "status": item.get("status") or "completed"}
            for item in items if item.get("type") == "message" and item.get("role") == "user"]


def summary_text(response: dict[str, Any]) -> str:
    """The answer text of the summarizing run's response object."""
    return "".join(part.get("text", "") for item in response.get("output", ())
                   if item.get("type") == "message" for part in item.get("content", ())
                   if part.get("type") == "output_text")


def compacted_output(items: list[dict[str, Any]], summary: str,
                     new_id: Callable[[str], str]) -> list[dict[str, Any]]:
    """The compacted conversation: the user's messages, then the summary; ``new_id(prefix)``
    makes item ids."""
    return [*user_messages(items, new_id),
            message_item(new_id(MESSAGE_PREFIX), "completed", [output_text(summary)])]


def compaction_object(response_id: str, created_at: int, output: list[dict[str, Any]],
                      usage: dict[str, Any]) -> dict[str, Any]:
    """The Open Responses ``CompactResource``."""
    return {"id": response_id, "object": COMPACTION_OBJECT, "output": output,
            "created_at": created_at, "usage": usage}
