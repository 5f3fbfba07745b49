"""Compile memory as a resource: estimated before a compile runs, bounded per compile, and
admitted against a total for the compiles running at once.

llguidance's memory for a grammar grows with the grammar's size: measured on wide strict
schemas (N required string properties, one process per size, RSS after the compile and the first
mask; ``benchmarks/hostile/README.md``): 3,000 properties (98 KB of compact JSON) +23 MB, 10,000
(330 KB) +72 MB, ~230 bytes per byte of schema.  The request's constraint text (the compiler's
cache key: the schema's compact JSON, the Lark grammar, the pattern) is the proxy; the estimate
rounds the measured rate up.

* A compile whose estimate is over :attr:`CompileOptions.max_compile_mb` does not run: a JSON
  schema is served from the generic JSON rung at once (reason ``compile_memory``), where under
  load it ended anyway after its compile spent the memory and timed out.
* Compiles running together hold their estimates against ``compile_memory_mb``; one that does
  not fit is refused with 503 ``compile_memory_busy`` and ``Retry-After`` (a retry beats a swap
  storm).  A lone compile is always admitted (its own bound is the one above).
* What the compile cache keeps is weighed by the same estimate (``cache_memory_mb``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import OverloadedError

# Bytes of compile memory per byte of constraint text (measured ~230, rounded up), and a fixed
# part per compile (the matcher's own tables, the rewrites' copies).
BYTES_PER_TEXT_BYTE = 256
FIXED_MB = 1.0
# Seconds a client refused for compile memory is asked to wait (a wide compile takes ~1-5 s).
RETRY_AFTER_S = 2


def estimate_compile_mb(text_bytes: int) -> float:
    """The memory (MB) a compile of ``text_bytes`` of constraint text is expected to take."""
    return FIXED_MB + text_bytes * BYTES_PER_TEXT_BYTE / 2**20


class CompileMemory:
    """The estimates of the compiles running now, against ``total_mb``; thread-safe."""

    def __init__(self, total_mb: float) -> None:
        self.total_mb = total_mb
        self.used_mb = 0.0
        self.refused = 0  # compiles refused so far (for tests and metrics)
        self._lock = threading.Lock()

    @contextmanager
    def admit(self, mb: float) -> Iterator[None]:
        """Hold ``mb`` while the block runs; :class:`OverloadedError` (503) when it does not
        fit beside the compiles running now."""
        with self._lock:
            if self.used_mb > 0 and self.used_mb + mb > self.total_mb:
                self.refused += 1
                raise OverloadedError(
                    f"the server is compiling other large constraints now (this one needs about "
                    f"{mb:.0f} MB of the {self.total_mb:.0f} MB compile memory budget, "
                    f"{self.used_mb:.0f} MB in use); retry after {RETRY_AFTER_S}s",
                    retry_after=RETRY_AFTER_S, code="compile_memory_busy")
            self.used_mb += mb
        try:
            yield
        finally:
            with self._lock:
                self.used_mb = max(0.0, self.used_mb - mb)
