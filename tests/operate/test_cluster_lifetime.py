"""``afm-struct cluster`` as a real process: SIGTERM drains every replica through HAProxy
(streams finish or end ``cancelled``, exit 0); SIGKILL leaves no replica or HAProxy running."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from .conftest import free_port
from .test_drain import LONG, SHORT, Stream

if shutil.which("haproxy") is None:
    pytest.skip("haproxy is not installed (make setup installs it on Debian: apt-get install -y haproxy)",
                allow_module_level=True)

GRACE_S = 5.0


def _start(args: list[str]) -> tuple[subprocess.Popen[str], list[str]]:
    """``afm-struct cluster ARGS`` until it says it is serving; (process, its stderr lines)."""
    proc = subprocess.Popen([sys.executable, "-m", "afm_struct.cli", "cluster", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + 120
    while not any("serving on" in line for line in lines):
        line = proc.stderr.readline()
        if not line or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("".join(lines) + proc.stderr.read())
        lines.append(line)
    # The rest of stderr is drained so that the cluster never blocks on a full pipe.
    threading.Thread(target=lambda: lines.extend(proc.stderr or ()), daemon=True).start()
    return proc, lines


def _gone(pid: int) -> bool:
    """Exited (a zombie left for its new parent to reap counts as exited)."""
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return bool(re.search(r"^State:\s+Z", state, re.M))


def _children(lines: list[str]) -> list[int]:
    return [int(p) for p in re.findall(r"pid (\d+)", "".join(lines))]


def test_sigterm_drains_every_replica_through_haproxy(tmp_path: Path) -> None:
    port = free_port()
    proc, lines = _start(["--replicas", "2", "--port", str(port), "--model", "scripted:50",
                          "--log-level", "warning", "--drain-seconds", str(GRACE_S),
                          "--run-dir", str(tmp_path)])
    url = f"http://127.0.0.1:{port}"
    try:
        streams = [Stream(f"cluster-drain-{i}", SHORT if i % 2 else LONG) for i in range(6)]
        threads = [threading.Thread(target=s.run, args=(url,)) for s in streams]
        for t in threads:
            t.start()
        assert all(s.first.wait(60) for s in streams)
        proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(120)
        assert proc.wait(timeout=120) == 0, "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
    for s in streams:
        assert s.error is None, (s.request_id, s.error)
        assert s.payloads and s.payloads[-1] == "[DONE]", (s.request_id, s.payloads[-3:])
        assert s.finish_reason == ("length" if s.max_tokens == SHORT else "cancelled"), s.request_id
    pids = _children(lines)
    assert len(pids) == 3 and all(_gone(p) for p in pids)  # two replicas and HAProxy
    logs = "".join((tmp_path / f"r{i}.log").read_text() for i in (1, 2))
    assert "drain grace of 5s over: cancelled" in logs  # the replicas' own drain did it


def test_sigkill_leaves_no_replica_or_haproxy_running(tmp_path: Path) -> None:
    proc, lines = _start(["--replicas", "2", "--port", str(free_port()), "--model", "scripted:200",
                          "--log-level", "info", "--drain-seconds", "1", "--run-dir", str(tmp_path)])
    pids = _children(lines)
    assert len(pids) == 3
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 60
    while not all(_gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [p for p in pids if not _gone(p)]
    for p in left:  # clean up before failing
        subprocess.run(["kill", "-9", str(p)], check=False)
    assert left == []
