"""Stored responses, as the endpoint sees them: a narrow seam over whatever store the app has.

The endpoint needs two things of a store: the items a ``previous_response_id`` continues from
(its chain's input and output items, oldest first) and keeping a finished response with the
items its request added.  :class:`ResponseKeeper` is that seam; the app's store (when one is
configured, ``app.state.response_store``) is reached through it.  Without a store, responses
are answered but not kept (their ``store`` says false) and a ``previous_response_id`` is a 404
in OpenAI's shape, as for an unknown id.
"""

from __future__ import annotations

from typing import Any, Protocol

from afm_struct.errors import NotFoundError

Item = dict[str, Any]


class ResponseKeeper(Protocol):
    """What the Responses endpoint asks of a response store (calls block: run them off the
    event loop)."""

    def conversation(self, owner: str, previous_response_id: str) -> list[Item]:
        """The items a request continuing ``previous_response_id`` starts from; NotFoundError
        (``param: previous_response_id``) when the owner has no such response."""
        ...

    def keep(self, owner: str, response: dict[str, Any], input_items: list[Item]) -> None:
        """Keep ``response`` (a finished response object) with the items its request added."""
        ...


def unknown_response(response_id: str, param: str | None = None) -> NotFoundError:
    """The 404 for an id this server cannot find (unknown, deleted, another owner's, or no
    store configured): one message whichever."""
    return NotFoundError(f"no stored response {response_id!r}: it is unknown, was deleted, or "
                         "was created with store: false (or this server keeps no responses)",
                         param=param)


def input_items(items: str | list[Any] | None) -> list[Item]:
    """A request's ``input`` as the items a store keeps (a string is one user message)."""
    if items is None:
        return []
    if isinstance(items, str):
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": items}]}]
    return [dict(item) for item in items if isinstance(item, dict)]
