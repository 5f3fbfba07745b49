"""Run compiles under a wall-clock limit (threads) or a time *and* memory limit (a child process).

llguidance compiles in microseconds to milliseconds and bounds itself with parser limits, so a
thread with a timeout is enough: a compile that overruns is abandoned (it finishes in the
background, its result dropped) and the request is served from a lower rung.

outlines-core can take tens of seconds and gigabytes on real schemas, and Rust aborts the whole
process when an allocation fails; so its compiles run in one long-lived child process with
``RLIMIT_AS`` set.  A compile that overruns the time limit gets the child killed (by its pid);
a compile that exhausts memory kills only the child.  Either way the caller gets a typed
:class:`WorkerLimitError` and the next call starts a fresh child.
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib
import multiprocessing as mp
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, TypeVar

T = TypeVar("T")

_THREADS = cf.ThreadPoolExecutor(max_workers=4, thread_name_prefix="afm-compile")


class WorkerLimitError(Exception):
    """A compile ran out of time (``reason == "compile_timeout"``) or memory (``compile_memory``)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def run_with_timeout(fn: Callable[[], T], timeout_s: float) -> T:
    """``fn()`` on a compile thread; :class:`WorkerLimitError` if it takes over ``timeout_s``."""
    future = _THREADS.submit(fn)
    try:
        return future.result(timeout=max(timeout_s, 0.0))
    except cf.TimeoutError as exc:
        future.cancel()
        raise WorkerLimitError("compile_timeout", f"over {timeout_s:.3g} s") from exc


def _child_main(conn: Connection, init: tuple[str, str, tuple[Any, ...]], max_memory_mb: int) -> None:
    """The child loop: set the memory limit, run the initializer, then serve calls until EOF."""
    import resource

    limit = max_memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    module, name, args = init
    state = getattr(importlib.import_module(module), name)(*args)
    while True:
        try:
            module, name, call_args = conn.recv()
        except EOFError:
            return
        try:
            result = getattr(importlib.import_module(module), name)(state, *call_args)
            conn.send(("ok", result))
        except MemoryError:
            conn.send(("memory", "MemoryError"))
        except BaseException as exc:  # reported to the parent, which decides what it means
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


class ProcessWorker:
    """One child process serving calls ``module.name(state, *args)`` under time/memory limits.

    ``init`` names a function ``module.name(*args)`` run once in the child; its return value is
    the ``state`` passed to every call (e.g. a tokenizer vocabulary that is costly to send).
    """

    def __init__(self, init: tuple[str, str, tuple[Any, ...]], *, max_memory_mb: int) -> None:
        self._init = init
        self._max_memory_mb = max_memory_mb
        self._lock = threading.Lock()
        self._proc: Any = None
        self._conn: Connection | None = None

    def _start(self) -> None:
        ctx = mp.get_context("spawn")  # no fork: the parent runs threads (llguidance, tokenizers)
        parent, child = ctx.Pipe()
        self._proc = ctx.Process(target=_child_main, args=(child, self._init, self._max_memory_mb),
                                 daemon=True, name="afm-compile-worker")
        self._proc.start()
        child.close()
        self._conn = parent

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()  # this worker's own child, by its pid
            self._proc.join(timeout=5)
        if self._conn is not None:
            self._conn.close()
        self._proc, self._conn = None, None

    def call(self, module: str, name: str, args: tuple[Any, ...], timeout_s: float) -> Any:
        """Run ``module.name(state, *args)`` in the child; raise :class:`WorkerLimitError` on a
        timeout or memory exhaustion, ``RuntimeError`` with the child's message on other errors.
        The time limit counts from the call (a cold start counts too: it is real latency)."""
        with self._lock:
            if self._proc is None or not self._proc.is_alive():
                self._start()
            assert self._conn is not None
            self._conn.send((module, name, args))
            if not self._conn.poll(timeout_s):
                self._kill()
                raise WorkerLimitError("compile_timeout", f"over {timeout_s:.3g} s")
            try:
                status, value = self._conn.recv()
            except (EOFError, OSError) as exc:  # the child died: Rust aborts on failed allocation
                self._kill()
                raise WorkerLimitError("compile_memory",
                                       f"worker died (limit {self._max_memory_mb} MB)") from exc
            if status == "memory":
                self._kill()
                raise WorkerLimitError("compile_memory", f"over {self._max_memory_mb} MB")
            if status == "error":
                raise RuntimeError(value)
            return value

    def close(self) -> None:
        """Stop the child process."""
        with self._lock:
            self._kill()
