"""The in-flight registry: request correlation ID → running generation, for cancellation.

A request is registered from admission until its consumer has seen the end of generation.
A cancel that finds it returns 200 and is authoritative: the response then finishes with
``cancelled`` even if the last token raced the cancel.  Unknown, completed and expired IDs are
404.  A second in-flight request with the same ID is refused with 409 (the ID must name one
generation, or a cancel could stop the wrong one).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from afm_struct.decoding.scheduler import Handle
from afm_struct.errors import InvalidRequestError, NotFoundError


class RequestIdConflictError(InvalidRequestError):
    """Another in-flight request already uses this X-Request-ID."""

    status = 409
    code = "duplicate_request_id"


@dataclass
class Inflight:
    """One registered generation."""

    request_id: str
    handle: Handle | None = None
    cancel_requested: bool = False
    completed: bool = False


class InflightRegistry:
    """Thread-safe map of in-flight request IDs (the loop owns it; the lock is cheap insurance)."""

    def __init__(self, remember: int = 1024) -> None:
        self._lock = threading.Lock()
        self._live: dict[str, Inflight] = {}
        self._recent: OrderedDict[str, None] = OrderedDict()
        self._remember = remember

    def register(self, request_id: str) -> Inflight:
        """Reserve ``request_id``; raise :class:`RequestIdConflictError` if it is in flight."""
        with self._lock:
            if request_id in self._live:
                raise RequestIdConflictError(
                    f"a request with X-Request-ID {request_id!r} is already in flight; "
                    "use a unique ID per request", param="X-Request-ID")
            entry = Inflight(request_id)
            self._live[request_id] = entry
            return entry

    def attach(self, entry: Inflight, handle: Handle) -> None:
        """Bind the scheduler handle (a cancel that came first is applied now)."""
        with self._lock:
            entry.handle = handle
            if entry.cancel_requested:
                handle.cancel()

    def cancel(self, request_id: str) -> NotFoundError | None:
        """Cancel ``request_id``: None when it was in flight, else the 404 error to return."""
        with self._lock:
            entry = self._live.get(request_id)
            if entry is None or entry.completed:
                why = ("has already completed" if request_id in self._recent
                       else "is unknown or has expired")
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
                if self._live.get(entry.request_id) is entry:
                    del self._live[entry.request_id]
                self._recent[entry.request_id] = None
                while len(self._recent) > self._remember:
                    self._recent.popitem(last=False)
            return entry.cancel_requested

    def discard(self, entry: Inflight) -> None:
        """Unregister an entry whose request was never admitted (it did not complete)."""
        with self._lock:
            entry.completed = True
            if self._live.get(entry.request_id) is entry:
                del self._live[entry.request_id]

    def __len__(self) -> int:
        with self._lock:
            return len(self._live)

    def __contains__(self, request_id: object) -> bool:
        with self._lock:
            return request_id in self._live
