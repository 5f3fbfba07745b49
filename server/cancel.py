"""The in-flight registry: (owner, request correlation ID) → running generation, for cancellation.

A request is registered from admission until its consumer has seen the end of generation, under
its owner (the tenant of its API key, :mod:`server.tenants`) and its ID.  A cancel that finds it
returns 200 and is authoritative: the response then finishes with ``cancelled`` even if the last
token raced the cancel.  Unknown, completed and expired IDs are 404, and so is another owner's
ID, with exactly the unknown-ID answer: tenants neither reach nor learn of each other's
requests.  A second in-flight request with the same ID and owner is refused with 409 (the ID
must name one generation, or a cancel could stop the wrong one); two owners may use one ID.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from afm_struct.decoding.scheduler import Handle
from afm_struct.errors import InvalidRequestError, NotFoundError


class RequestIdConflictError(InvalidRequestError):
    """Another in-flight request of the same owner already uses this X-Request-ID."""

    status = 409
    code = "duplicate_request_id"


@dataclass
class Inflight:
    """One registered generation."""

    request_id: str
    owner: str
    handle: Handle | None = None
    cancel_requested: bool = False
    completed: bool = False

    @property
    def key(self) -> tuple[str, str]:
        """Where the registry files it: owner first."""
        return self.owner, self.request_id


class InflightRegistry:
    """Thread-safe map of in-flight requests by (owner, request ID) (the loop owns it; the lock
    is cheap insurance)."""

    def __init__(self, remember: int = 1024) -> None:
        self._lock = threading.Lock()
        self._live: dict[tuple[str, str], Inflight] = {}
        self._recent: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._remember = remember

    def register(self, owner: str, request_id: str) -> Inflight:
        """Reserve ``request_id`` for ``owner``; raise :class:`RequestIdConflictError` if that
        owner has it in flight."""
        with self._lock:
            if (owner, request_id) in self._live:
                raise RequestIdConflictError(
                    f"a request with X-Request-ID {request_id!r} is already in flight; "
                    "use a unique ID per request", param="X-Request-ID")
            entry = Inflight(request_id, owner)
            self._live[entry.key] = entry
            return entry

    def attach(self, entry: Inflight, handle: Handle) -> None:
        """Bind the scheduler handle (a cancel that came first is applied now)."""
        with self._lock:
            entry.handle = handle
            if entry.cancel_requested:
                handle.cancel()

    def cancel(self, owner: str, request_id: str) -> NotFoundError | None:
        """Cancel ``owner``'s ``request_id``: None when it was in flight, else the 404 error to
        return (another owner's request is not looked at: its ID is unknown here)."""
        key = (owner, request_id)
        with self._lock:
            entry = self._live.get(key)
            if entry is None or entry.completed:
                why = "has already completed" if key in self._recent else "is unknown or has expired"
                return NotFoundError(f"no in-flight request {request_id!r}: it {why}",
                                     param="request_id")
            entry.cancel_requested = True
            if entry.handle is not None:
                entry.handle.cancel()
            return None

    def complete(self, entry: Inflight) -> bool:
        """Unregister ``entry`` once its end is known; return whether a cancel was accepted."""
        with self._lock:
            if not entry.completed:
                entry.completed = True
                if self._live.get(entry.key) is entry:
                    del self._live[entry.key]
                self._recent[entry.key] = None
                while len(self._recent) > self._remember:
                    self._recent.popitem(last=False)
            return entry.cancel_requested

    def discard(self, entry: Inflight) -> None:
        """Unregister an entry whose request was never admitted (it did not complete)."""
        with self._lock:
            entry.completed = True
            if self._live.get(entry.key) is entry:
                del self._live[entry.key]

    def ids(self) -> list[tuple[str, str]]:
        """(owner, request ID) of every request in flight now (a snapshot)."""
        with self._lock:
            return list(self._live)

    def __len__(self) -> int:
        with self._lock:
            return len(self._live)

    def __contains__(self, key: object) -> bool:
        """``(owner, request_id)`` in flight; a bare request ID: in flight for some owner."""
        with self._lock:
            if isinstance(key, tuple):
                return key in self._live
            return any(request_id == key for _, request_id in self._live)
