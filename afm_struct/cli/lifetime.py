"""Child processes that do not outlive ``afm-struct cluster``, and its stopping order.

A replica or HAProxy started by the cluster asks the kernel (Linux ``PR_SET_PDEATHSIG``) for a
SIGTERM when the cluster dies, so a cluster killed by SIGKILL (or an OOM kill) leaves nothing
running: each replica then drains and exits as on an ordinary SIGTERM.  Elsewhere (macOS) the
hook does nothing; a normal stop still stops everything.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

_PR_SET_PDEATHSIG = 1


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    return libc.prctl  # type: ignore[no-any-return]


# Resolved once in the parent: the child between fork and exec only calls it.
_PRCTL = _prctl()


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the child sent SIGTERM when this process dies (None where the
    platform has no such request)."""
    if _PRCTL is None:
        return None
    parent = os.getpid()
    prctl = _PRCTL

    def request() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the request was made
            os.kill(os.getpid(), signal.SIGTERM)

    return request


def terminate_all(procs: Sequence[subprocess.Popen[bytes]], sig: int, grace_s: float) -> None:
    """Send ``sig`` to every live process, wait up to ``grace_s`` for all, SIGKILL the rest."""
    live = [p for p in procs if p.poll() is None]
    for proc in live:
        proc.send_signal(sig)
    deadline = time.monotonic() + grace_s
    for proc in live:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
