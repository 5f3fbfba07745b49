"""Hand freed heap memory back to the OS: after a request that needed a lot of it, and when idle.

Tokenizing a long prompt allocates hundreds of MB in small blocks (the tokenizers library's
offsets and token strings, the id list) in the worker thread's glibc arena.  Freed, they stay
in the arena, which glibc shrinks only from its top, so long prompts left the process bigger
until each arena held its high-water mark: a server at 302 MB stood at 1.07 GB after 5 MB
prompts, all of it free.  ``malloc_trim(0)`` returns the free pages inside every arena and the
main arena's top; the free top of a thread's arena it cannot return, which is why prompts are
tokenized on one thread (:data:`server.admission.TOKENIZER_THREAD`).

Decoding leaves the same kind of free memory behind (prefill activations, per-batch buffers of
varying shapes): after mixed traffic a server held ~300 MB of free heap that ``malloc_trim``
returned (1.6 GB → 1.28 GB).  Trimming costs 0.2-0.3 s on a 1.5 GB heap, so the scheduler does
it only once it has been idle a while (:class:`IdleRelease`), on a thread of its own.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Callable

# Prompts at least this long (in tokens) release what tokenizing them took; the transient is
# ~250 bytes a token, so shorter ones leave only a few MB to be reused by the next request.
RELEASE_AFTER_TOKENS = 16_384


def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None).malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None


_TRIM = _malloc_trim()


def release_free_memory() -> bool:
    """Return the heap's free pages to the OS; False where the C library cannot."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True


class IdleRelease:
    """Trim the heap once per idle spell, after ``idle_after_s`` without work.

    The scheduler calls :meth:`busy` when it steps a batch and :meth:`poll` while it waits.
    The trim runs on a daemon thread: a request that arrives meanwhile is admitted at once
    (its allocations wait only on the arena being trimmed).
    """

    def __init__(self, idle_after_s: float = 2.0,
                 release: Callable[[], bool] = release_free_memory) -> None:
        self.idle_after_s = idle_after_s
        self._release = release
        self._dirty = False  # work since the last trim
        self._last_busy = 0.0
        self._thread: threading.Thread | None = None
        self.releases = 0

    def busy(self, now: float) -> None:
        """Work was done at ``now``: the next idle spell trims again."""
        self._dirty = True
        self._last_busy = now

    def poll(self, now: float) -> bool:
        """Start a trim if the heap may hold freed memory and no work came for a while."""
        if not self._dirty or now - self._last_busy < self.idle_after_s or self.idle_after_s < 0:
            return False
        if self._thread is not None and self._thread.is_alive():
            return False
        self._dirty = False
        self.releases += 1
        self._thread = threading.Thread(target=self._release, name="afm-heap-release", daemon=True)
        self._thread.start()
        return True
