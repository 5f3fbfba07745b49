"""Events from the scheduler thread to an asyncio loop, many per wake-up.

One ``call_soon_threadsafe`` per event per stream cost a self-pipe write and a loop iteration
each (~6 % of the scheduler thread at 32 streams, issue 40).  A :class:`LoopMailbox` per loop
collects the events posted while its loop has not drained yet; only the post that finds the box
empty wakes the loop, and the loop's one callback hands every collected event to its queue, in
the order posted.  So one decoding step's deltas for all streams of a loop cost about one
wake-up (more only when the loop drains between two posts of a step, which is then as cheap).

More it was, when the loop kept up: an idle loop drained each post before the next, so a step of
32 streams still cost ~32 self-pipe writes and as many hand-overs of the GIL between the two
threads (5 % of the scheduler thread's samples, json_schema at 32 streams).  Inside
:func:`held_wakeups` (the scheduler wraps a step's sampling and emitting in it) posts from that
thread only collect, and each loop they posted to is woken once, when the block ends: a step's
deltas for all streams reach the loop in one batch, as soon as the step has emitted them.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# Event sink on the loop side: ``queue.put_nowait``.
Put = Callable[[Any], None]

# Per thread: the mailboxes posted to inside held_wakeups (None outside it).
_held = threading.local()


class LoopMailbox:
    """Posts from any thread, delivered on ``loop`` in order, one wake-up per batch."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._box: list[tuple[Put, Any, Callable[[], None]]] = []
        self._closed = False
        self._scheduled = False  # a _drain is on its way to the loop

    def post(self, put: Put, item: Any, on_closed: Callable[[], None]) -> None:
        """Deliver ``put(item)`` on the loop; ``on_closed()`` (on this thread) instead when the
        loop is closed, for this post and any still waiting in the box."""
        with self._lock:
            if self._closed:
                stranded = [(put, item, on_closed)]
            else:
                self._box.append((put, item, on_closed))
                if self._scheduled:
                    return  # a wake-up is already on its way
                held = getattr(_held, "boxes", None)
                if held is not None:
                    held.setdefault(id(self), self)  # woken when the held block ends
                    return
                self._scheduled = True
                stranded = []
        if stranded:
            stranded[0][2]()
            return
        self._wake()

    def flush(self) -> None:
        """Wake the loop for what waits in the box, unless a wake-up is already on its way."""
        with self._lock:
            if self._scheduled or self._closed or not self._box:
                return
            self._scheduled = True
        self._wake()

    def _wake(self) -> None:
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
            self._scheduled = False
        for put, item, _ in batch:
            put(item)


@contextmanager
def held_wakeups() -> Iterator[None]:
    """Posts this thread makes inside the block wake each of their loops once, when it ends
    (nested blocks: when the outermost ends)."""
    if getattr(_held, "boxes", None) is not None:
        yield
        return
    boxes: dict[int, LoopMailbox] = {}
    _held.boxes = boxes
    try:
        yield
    finally:
        _held.boxes = None
        for box in boxes.values():
            box.flush()


def flush_held() -> None:
    """Inside :func:`held_wakeups`: wake the loops for what was posted so far, now."""
    boxes = getattr(_held, "boxes", None)
    if boxes:
        for box in boxes.values():
            box.flush()
        boxes.clear()


_boxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopMailbox] = weakref.WeakKeyDictionary()
_boxes_lock = threading.Lock()


def mailbox_for(loop: asyncio.AbstractEventLoop) -> LoopMailbox:
    """The one mailbox of ``loop`` (made on first use, gone with the loop)."""
    with _boxes_lock:
        box = _boxes.get(loop)
        if box is None:
            box = _boxes[loop] = LoopMailbox(loop)
        return box
