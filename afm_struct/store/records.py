"""What the response store keeps and returns: stored responses, pages of items, store errors.

Pure values (no I/O), shared by every store implementation.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ..errors import AfmError, InvalidRequestError, NotFoundError

Item = dict[str, Any]
Order = Literal["asc", "desc"]
# Statuses a Responses API response object takes.
STATUSES = frozenset({"completed", "incomplete", "failed", "in_progress", "cancelled", "queued"})
DEFAULT_LIMIT, MAX_LIMIT = 20, 100


@dataclass(frozen=True)
class StoredResponse:
    """A response as stored: who owns it, what went in and came out, and how it links back.

    ``input_items`` are the items this request added (its ``input``), not the conversation
    before it; that is reached through ``previous_response_id``.  ``extra`` holds the other
    fields of the response object (usage, instructions, text format, tools, ...), opaque to
    the store.  Items are JSON objects; each gets an ``id`` when stored if it has none.
    """

    id: str
    owner: str
    status: str
    created_at: int
    model: str
    input_items: list[Item] = field(default_factory=list)
    output_items: list[Item] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    previous_response_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.id or not self.owner:
            raise ValueError("a stored response needs an id and an owner")
        if self.previous_response_id == self.id:
            raise ValueError("a response cannot continue itself")
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {sorted(STATUSES)}, not {self.status!r}")
        for name in ("input_items", "output_items"):
            if not all(isinstance(item, dict) for item in getattr(self, name)):
                raise ValueError(f"{name} must be JSON objects")

    def with_item_ids(self) -> StoredResponse:
        """This response with an ``id`` on every item (``item_<hex>`` where one is missing)."""
        def ided(items: list[Item]) -> list[Item]:
            return [item if isinstance(item.get("id"), str) and item["id"]
                    else {**item, "id": f"item_{uuid.uuid4().hex}"} for item in items]
        return replace(self, input_items=ided(self.input_items), output_items=ided(self.output_items))


@dataclass(frozen=True)
class ItemPage:
    """One page of a response's input items, as ``GET /v1/responses/{id}/input_items`` lists
    them (``object: "list"``)."""

    data: list[Item]
    has_more: bool

    @property
    def first_id(self) -> str | None:
        """The first item's id (None on an empty page)."""
        return self.data[0]["id"] if self.data else None

    @property
    def last_id(self) -> str | None:
        """The last item's id (None on an empty page)."""
        return self.data[-1]["id"] if self.data else None

    def to_dict(self) -> dict[str, Any]:
        """The list object of the wire."""
        return {"object": "list", "data": self.data, "first_id": self.first_id,
                "last_id": self.last_id, "has_more": self.has_more}


@dataclass(frozen=True)
class StoreUsage:
    """What one owner's live (unexpired) stored responses take: how many, and their bytes
    (metadata, extra fields and items as stored, UTF-8 JSON)."""

    responses: int
    bytes: int


@dataclass(frozen=True)
class StoreQuota:
    """What each owner may keep (None: no bound): stored responses, and their bytes."""

    responses: int | None = None
    bytes: int | None = None

    def __post_init__(self) -> None:
        for name in ("responses", "bytes"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"a store quota's {name} must be a positive integer or None, not {value!r}")

    def check(self, usage: StoreUsage, adding: int) -> None:
        """Raise :class:`QuotaExceededError` when one more response of ``adding`` bytes would
        take an owner holding ``usage`` past this quota."""
        if self.responses is not None and usage.responses + 1 > self.responses:
            raise QuotaExceededError(
                f"this API key's tenant already keeps {usage.responses:,} stored responses, its "
                f"quota is {self.responses:,}: {QuotaExceededError.FIX}")
        if self.bytes is not None and usage.bytes + adding > self.bytes:
            raise QuotaExceededError(
                f"this API key's tenant keeps {usage.bytes:,} bytes of stored responses and this "
                f"one would add {adding:,} (before its output), past its quota of {self.bytes:,} "
                f"bytes: {QuotaExceededError.FIX}")


class QuotaExceededError(AfmError):
    """Keeping one more response would take its owner past the store quota (429, before the
    request runs)."""

    type = "insufficient_quota"
    status = 429
    code = "store_quota_exceeded"
    FIX = ("delete stored responses (DELETE /v1/responses/{id}), let them expire, or send "
           "store: false")


class StoreError(AfmError):
    """The response store cannot be opened or used; the message names the path and the fix."""

    type = "server_error"
    status = 503
    code = "store_unavailable"


def not_found(response_id: str, param: str | None = None) -> NotFoundError:
    """The one answer for an id that is unknown, deleted, expired or another owner's: the same
    words whichever, so an owner learns nothing of others' ids."""
    return NotFoundError(f"no stored response {response_id!r}: it is unknown, was deleted or has "
                         "expired, or was created with store: false", param=param)


def check_page(limit: int, order: str) -> None:
    """Raise the 400 for a ``limit`` outside 1-100 or an ``order`` other than asc/desc."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequestError(f"limit must be an integer from 1 to {MAX_LIMIT}, not {limit!r}",
                                  param="limit")
    if order not in ("asc", "desc"):
        raise InvalidRequestError(f"order must be 'asc' or 'desc', not {order!r}", param="order")


def stored_size(metadata: Any, extra: Any, items: list[Item]) -> int:
    """The bytes a response takes in the store: its metadata, extra fields and items as
    stored (UTF-8 JSON), what :attr:`StoreUsage.bytes` adds up."""
    texts = [to_json(metadata), to_json(extra), *(to_json(item) for item in items)]
    return sum(len(text.encode()) for text in texts)


def to_json(value: Any) -> str:
    """Compact JSON (NaN and infinities refused: they are not JSON)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
