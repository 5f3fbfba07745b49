"""Events from the scheduler thread to an asyncio loop, many per wake-up.

One ``call_soon_threadsafe`` per event per stream cost a self-pipe write and a loop iteration
each (~6 % of the scheduler thread at 32 streams, issue 40).  A :class:`LoopMailbox` per loop
collects the events posted while its loop has not drained yet; only the post that finds the box
empty wakes the loop, and the loop's one callback hands every collected event to its queue, in
the order posted.  So one decoding step's deltas for all streams of a loop cost about one
wake-up (more only when the loop drains between two posts of a step, which is then as cheap).
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable
from typing import Any

# Event sink on the loop side: ``queue.put_nowait``.
Put = Callable[[Any], None]


class LoopMailbox:
    """Posts from any thread, delivered on ``loop`` in order, one wake-up per batch."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._box: list[tuple[Put, Any, Callable[[], None]]] = []
        self._closed = False

    def post(self, put: Put, item: Any, on_closed: Callable[[], None]) -> None:
        """Deliver ``put(item)`` on the loop; ``on_closed()`` (on this thread) instead when the
        loop is closed, for this post and any still waiting in the box."""
        with self._lock:
            if self._closed:
                stranded = [(put, item, on_closed)]
            else:
                self._box.append((put, item, on_closed))
                if len(self._box) > 1:
                    return  # a wake-up is already on its way
                stranded = []
        if not stranded:
            try:
                self._loop.call_soon_threadsafe(self._drain)
                return
            except RuntimeError:  # the loop closed (its clients are gone)
                with self._lock:
                    self._closed = True
                    stranded, self._box = self._box, []
        for _, _, closed in stranded:
            closed()

    def _drain(self) -> None:
        with self._lock:
            batch, self._box = self._box, []
        for put, item, _ in batch:
            put(item)


_boxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopMailbox] = weakref.WeakKeyDictionary()
_boxes_lock = threading.Lock()


def mailbox_for(loop: asyncio.AbstractEventLoop) -> LoopMailbox:
    """The one mailbox of ``loop`` (made on first use, gone with the loop)."""
    with _boxes_lock:
        box = _boxes.get(loop)
        if box is None:
            box = _boxes[loop] = LoopMailbox(loop)
        return box
