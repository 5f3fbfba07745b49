"""One loop wake-up carries every event posted since the last (issue 40): order kept per queue,
a closed loop stops the posting requests."""

from __future__ import annotations

import asyncio
import threading

from afm_struct.decoding.loop_mailbox import LoopMailbox, held_wakeups, mailbox_for


def _counting_loop() -> tuple[asyncio.AbstractEventLoop, list[int]]:
    """A new event loop whose cross-thread wake-ups (call_soon_threadsafe) are counted."""
    loop = asyncio.new_event_loop()
    wakeups: list[int] = []
    real = loop.call_soon_threadsafe

    def counting(*args):
        wakeups.append(1)
        return real(*args)

    loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
    return loop, wakeups


def test_posts_from_a_thread_arrive_in_order_with_one_wake_up():
    loop, wakeups = _counting_loop()
    try:
        box = LoopMailbox(loop)
        queues = [asyncio.Queue() for _ in range(4)]

        def step():  # one decoding step: an event for every stream, 50 steps
            for k in range(50):
                for i, q in enumerate(queues):
                    box.post(q.put_nowait, (i, k), lambda: None)

        t = threading.Thread(target=step)
        t.start()
        t.join()  # the loop is not running: everything waits in the box
        loop.run_until_complete(asyncio.sleep(0))
        assert len(wakeups) == 1
        for i, q in enumerate(queues):
            assert [q.get_nowait() for _ in range(q.qsize())] == [(i, k) for k in range(50)]
        box.post(queues[0].put_nowait, "next", lambda: None)  # drained: the next post wakes again
        loop.run_until_complete(asyncio.sleep(0))
        assert len(wakeups) == 2 and queues[0].get_nowait() == "next"
    finally:
        loop.close()


def test_a_closed_loop_calls_on_closed_for_every_post():
    loop = asyncio.new_event_loop()
    box = LoopMailbox(loop)
    q: asyncio.Queue = asyncio.Queue()
    closed: list[str] = []
    loop.close()
    box.post(q.put_nowait, 1, lambda: closed.append("a"))
    box.post(q.put_nowait, 2, lambda: closed.append("b"))
    assert closed == ["a", "b"] and q.qsize() == 0


def test_one_mailbox_per_loop():
    a, b = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:
        assert mailbox_for(a) is mailbox_for(a) and mailbox_for(a) is not mailbox_for(b)
    finally:
        a.close()
        b.close()


def test_held_posts_wake_each_loop_once_when_the_block_ends():
    """A step's posts inside held_wakeups reach a loop that keeps up in one wake-up (without the
    block, a loop that drains between posts is woken once per post), in order, and none is
    delivered before the block ends."""
    loop, wakeups = _counting_loop()
    try:
        box = LoopMailbox(loop)
        queues = [asyncio.Queue() for _ in range(4)]
        with held_wakeups():
            for i, q in enumerate(queues):
                box.post(q.put_nowait, (i, 0), lambda: None)
                loop.run_until_complete(asyncio.sleep(0))  # the loop keeps up: nothing to drain yet
                with held_wakeups():  # nested: still held
                    box.post(q.put_nowait, (i, 1), lambda: None)
            assert wakeups == [] and all(q.qsize() == 0 for q in queues)
        loop.run_until_complete(asyncio.sleep(0))
        assert len(wakeups) == 1
        for i, q in enumerate(queues):
            assert [q.get_nowait() for _ in range(q.qsize())] == [(i, 0), (i, 1)]
        for i, q in enumerate(queues):  # not held: a loop that keeps up is woken per post
            box.post(q.put_nowait, (i, 2), lambda: None)
            loop.run_until_complete(asyncio.sleep(0))
        assert len(wakeups) == 5
    finally:
        loop.close()


def test_held_posts_to_a_loop_that_closed_call_on_closed():
    loop = asyncio.new_event_loop()
    box = LoopMailbox(loop)
    q: asyncio.Queue = asyncio.Queue()
    closed: list[str] = []
    with held_wakeups():
        box.post(q.put_nowait, 1, lambda: closed.append("a"))
        loop.close()
        box.post(q.put_nowait, 2, lambda: closed.append("b"))
    assert closed == ["a", "b"] and q.qsize() == 0
