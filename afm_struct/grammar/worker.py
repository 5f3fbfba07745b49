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
import os
import pickle
import select
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_THREADS = cf.ThreadPoolExecutor(max_workers=4, thread_name_prefix="afm-compile")


class WorkerLimitError(Exception):
    """A compile ran out of time (``reason == "compile_timeout"``) or memory (``compile_memory``)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def submit(fn: Callable[[], T]) -> cf.Future[T]:
    """Start ``fn()`` on a compile thread; the caller bounds the wait (``future.result(timeout)``)."""
    return _THREADS.submit(fn)


def run_with_timeout(fn: Callable[[], T], timeout_s: float) -> T:
    """``fn()`` on a compile thread; :class:`WorkerLimitError` if it takes over ``timeout_s``."""
    future = submit(fn)
    try:
        return future.result(timeout=max(timeout_s, 0.0))
    except cf.TimeoutError as exc:
        future.cancel()
        raise WorkerLimitError("compile_timeout", f"over {timeout_s:.3g} s") from exc


def _read_frame(stream: Any) -> Any:
    header = stream.read(8)
    if len(header) < 8:
        raise EOFError
    size = int.from_bytes(header, "little")
    body = stream.read(size)
    if len(body) < size:
        raise EOFError
    return pickle.loads(body)


def _write_frame(stream: Any, value: Any) -> None:
    body = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(len(body).to_bytes(8, "little") + body)
    stream.flush()


def _child_main() -> None:
    """The child loop (``python -m afm_struct.grammar.worker``): set the memory limit, run the
    initializer, then serve pickled calls on stdin/stdout until EOF."""
    import resource

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # stray prints must not corrupt the frames
    max_memory_mb, (module, name, args) = _read_frame(stdin)
    limit = max_memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    state = getattr(importlib.import_module(module), name)(*args)
    while True:
        try:
            module, name, call_args = _read_frame(stdin)
        except EOFError:
            return
        try:
            result = getattr(importlib.import_module(module), name)(state, *call_args)
            _write_frame(stdout, ("ok", result))
        except MemoryError:
            _write_frame(stdout, ("memory", "MemoryError"))
        except BaseException as exc:  # reported to the parent, which decides what it means
            _write_frame(stdout, ("error", f"{type(exc).__name__}: {exc}"))


class ProcessWorker:
    """One child process serving calls ``module.name(state, *args)`` under time/memory limits.

    ``init`` names a function ``module.name(*args)`` run once in the child; its return value is
    the ``state`` passed to every call (e.g. a tokenizer vocabulary that is costly to send).
    The child is a plain ``python -m`` process: nothing of the caller's ``__main__`` is re-run.
    """

    def __init__(self, init: tuple[str, str, tuple[Any, ...]], *, max_memory_mb: int) -> None:
        self._init = init
        self._max_memory_mb = max_memory_mb
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None

    def _start(self) -> None:
        # The child compiles grammars only: no BLAS.  A preloaded OpenBLAS reserves hundreds of
        # MB of address space per thread at load, which would count against RLIMIT_AS; nor may
        # `import afm_struct` load one in the child (models/blas_select.py).
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        env["AFM_STRUCT_BLAS"] = "none"
        self._proc = subprocess.Popen(
            [sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, close_fds=True, env=env)
        assert self._proc.stdin is not None
        _write_frame(self._proc.stdin, (self._max_memory_mb, self._init))

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()  # this worker's own child, by its pid
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            for stream in (self._proc.stdin, self._proc.stdout):
                if stream is not None:
                    stream.close()
        self._proc = None

    def call(self, module: str, name: str, args: tuple[Any, ...], timeout_s: float) -> Any:
        """Run ``module.name(state, *args)`` in the child; raise :class:`WorkerLimitError` on a
        timeout or memory exhaustion, ``RuntimeError`` with the child's message on other errors.
        The time limit counts from the call (a cold start counts too: it is real latency)."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            proc = self._proc
            assert proc is not None and proc.stdin is not None and proc.stdout is not None
            try:
                _write_frame(proc.stdin, (module, name, args))
            except (BrokenPipeError, OSError) as exc:
                self._kill()
                raise WorkerLimitError("compile_memory", "worker died before the call") from exc
            ready, _, _ = select.select([proc.stdout], [], [], max(timeout_s, 0.0))
            if not ready:
                self._kill()
                raise WorkerLimitError("compile_timeout", f"over {timeout_s:.3g} s")
            try:
                status, value = _read_frame(proc.stdout)
            except (EOFError, OSError, pickle.UnpicklingError) as exc:
                # The child died mid-call: Rust aborts the process when an allocation fails.
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


if __name__ == "__main__":
    _child_main()
