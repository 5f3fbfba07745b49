"""Stored responses, as the Responses endpoint reads and writes them in the app's store.

The store (:class:`afm_struct.store.ResponseStore`, ``app.state.response_store``; None with
``--no-store``) keeps each response with its owner, the items its request added, its output
items and its ``previous_response_id`` link; the rest of the response object rides in
``extra``.  This module converts between the wire's response object and that record, and
normalizes a request's ``input`` into the items ``input_items`` lists (a string is one user
message; a message's string content becomes one text part).  Store calls block: the routes run
them off the event loop.
"""

from __future__ import annotations

from typing import Any

from afm_struct.errors import NotFoundError
from afm_struct.store import Item, StoredResponse

from .shapes import with_defaults

# Response-object fields the record keeps in its own columns (the rest go to ``extra``).
COLUMNS = ("id", "object", "status", "created_at", "model", "output", "metadata", "previous_response_id")


def unknown_response(response_id: str, param: str | None = None) -> NotFoundError:
    """The 404 for an id this server cannot find (unknown, deleted, another owner's, made with
    ``store: false``, or no store configured): one message whichever."""
    return NotFoundError(f"no stored response {response_id!r}: it is unknown, was deleted, or "
                         "was created with store: false (or this server keeps no responses)",
                         param=param)


def input_items(items: str | list[Any] | None) -> list[Item]:
    """A request's ``input`` as the items a store keeps, each an explicit typed item."""
    if items is None:
        return []
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    out: list[Item] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        item = dict(item)
        if "role" in item and "type" not in item:
            item["type"] = "message"
        if item.get("type") == "message" and isinstance(item.get("content"), str):
            part = "output_text" if item.get("role") == "assistant" else "input_text"
            item["content"] = [{"type": part, "text": item["content"]}]
        out.append(item)
    return out


def record(owner: str, response: dict[str, Any], inputs: list[Item]) -> StoredResponse:
    """The store's record of a finished ``response`` (the wire object) and its request's input."""
    return StoredResponse(
        id=response["id"], owner=owner, status=response["status"], created_at=int(response["created_at"]),
        model=response["model"], input_items=inputs, output_items=list(response["output"]),
        metadata=dict(response.get("metadata") or {}),
        previous_response_id=response.get("previous_response_id"),
        extra={k: v for k, v in response.items() if k not in COLUMNS})


def response_of(stored: StoredResponse) -> dict[str, Any]:
    """The wire's response object of a stored record (one kept before a setting was stated
    states the default that ran: :func:`.shapes.with_defaults`)."""
    return with_defaults({"id": stored.id, "object": "response", "created_at": stored.created_at,
                          "status": stored.status, **stored.extra, "output": stored.output_items,
                          "metadata": stored.metadata, "previous_response_id": stored.previous_response_id,
                          "model": stored.model})
