"""The interface every response store implements (:mod:`.sqlite`, :mod:`.postgres`).

Ownership is enforced here, not by callers: every read and delete takes the owner, and a
response is known only to its owner.  Another owner's id behaves exactly as an unknown one
(the same :func:`~.records.not_found` error, same words), and ids are unique per owner, so two
owners holding one id never collide nor learn of each other.  Methods block on I/O: call them
off the event loop (``asyncio.to_thread``).  They are safe to call from several threads at
once, and several processes may share one store.

With a ttl (``open_store(..., ttl_s=...)``), a response whose ``created_at`` is more than ttl
seconds old has expired: every call treats it as deleted (the same not-found answer), and the
next write, or :meth:`ResponseStore.purge`, removes it and its items.

Errors: ``NotFoundError`` (404) for an id the owner does not have, ``InvalidRequestError``
(400) for bad pagination or links, :class:`~.records.StoreError` (503) when the database
fails while serving (opening fails with a StoreError too, naming the path).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .records import DEFAULT_LIMIT, Item, ItemPage, Order, StoredResponse, StoreUsage


@runtime_checkable
class ResponseStore(Protocol):
    """Stored responses, each with its owner, items and ``previous_response_id`` link."""

    #: What the store is, for start-up lines and errors (a path, or a URL without password).
    description: str

    def put(self, response: StoredResponse) -> StoredResponse:
        """Store ``response`` and return it as stored (every item with an ``id``).

        The same id again by the same owner replaces it (a response that was in progress, now
        finished); its ``previous_response_id`` cannot change.  Raises NotFoundError
        (``param: previous_response_id``) when a new response continues one the owner does not
        have, and InvalidRequestError when a link would change or make a cycle.  Items,
        metadata and extra must be JSON values (NaN and infinities are not): ValueError or
        TypeError otherwise, a caller's bug.
        """
        ...

    def get(self, owner: str, response_id: str) -> StoredResponse:
        """The owner's response; NotFoundError otherwise."""
        ...

    def delete(self, owner: str, response_id: str) -> None:
        """Remove the owner's response and its items for good; NotFoundError otherwise.
        Responses continuing it keep their own items (their chain then ends in a gap)."""
        ...

    def input_items(self, owner: str, response_id: str, *, after: str | None = None,
                    limit: int = DEFAULT_LIMIT, order: Order = "desc") -> ItemPage:
        """A page of the response's input items, as OpenAI's ``input_items`` lists them:
        ``order`` by position (``desc``: last item first), starting after the item whose id is
        ``after``, at most ``limit`` (1-100).  NotFoundError for another owner's response;
        InvalidRequestError (``param`` limit, order or after) for a bad page."""
        ...

    def conversation(self, owner: str, previous_response_id: str) -> list[Item]:
        """The items a request continuing ``previous_response_id`` starts from: for each
        response of its chain, oldest first, its input items then its output items.
        NotFoundError (``param: previous_response_id``) when it, or a response it continues,
        is not the owner's (unknown, deleted, another owner's)."""
        ...

    def usage(self, owner: str) -> StoreUsage:
        """How many live responses the owner keeps and the bytes they take (expired ones do
        not count)."""
        ...

    def purge(self) -> int:
        """Delete every expired response and its items now (every ``put`` does it too);
        returns how many were deleted (0 without a ttl)."""
        ...

    def close(self) -> None:
        """Release the store's connections (idempotent)."""
        ...
