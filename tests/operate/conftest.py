"""Real ``afm-struct serve`` processes for the operator-facing tests (wheel, drain, logs,
Prometheus): started on a free port, read over real HTTP, stopped by signal."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

# The checkout's own CLI, run as a module (PYTHONPATH, when set, points at the checkout).
CLI = [sys.executable, "-m", "afm_struct.cli"]


def free_port() -> int:
    """A port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ServeProcess:
    """A running ``serve`` subprocess; its stderr goes to ``log`` (a file, so it never blocks)."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        """The server's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Until /health answers 200 (fails with the log if the process dies first)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"server did not start (exit {self.proc.poll()}):\n{self.stderr()}")
            time.sleep(0.1)

    def stderr(self) -> str:
        """What the server wrote to stderr so far."""
        return self.log.read_text(errors="replace")

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM, then wait for the exit status."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        """Make sure it is gone (test teardown)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def start_serve(args: list[str], *, cmd: list[str] | None = None, cwd: Path | None = None,
                env: dict[str, str] | None = None, log_dir: Path | None = None) -> ServeProcess:
    """``afm-struct serve --port <free> ARGS`` (``cmd`` replaces the CLI), not yet ready."""
    port = free_port()
    log = Path(tempfile.mkstemp(prefix="serve-", suffix=".log", dir=log_dir)[1])
    with open(log, "wb") as err:
        proc = subprocess.Popen([*(cmd or CLI), "serve", "--port", str(port), *args], cwd=cwd,
                                env=env if env is not None else os.environ.copy(),
                                stdout=subprocess.DEVNULL, stderr=err)
    return ServeProcess(proc, port, log)


@pytest.fixture
def serve_process(tmp_path: Path) -> Iterator:
    """Factory for :func:`start_serve` processes, killed at teardown."""
    started: list[ServeProcess] = []

    def make(args: list[str], **kwargs) -> ServeProcess:
        p = start_serve(args, log_dir=tmp_path, **kwargs)
        started.append(p)
        return p

    yield make
    for p in started:
        p.kill()
