"""Hand freed heap memory back to the OS after a request that needed a lot of it.

Tokenizing a long prompt allocates hundreds of MB in small blocks (the tokenizers library's
offsets and token strings, the id list) in the worker thread's glibc arena.  Freed, they stay
in the arena, which glibc shrinks only from its top, so long prompts left the process bigger
until each arena held its high-water mark: a server at 302 MB stood at 1.07 GB after 5 MB
prompts, all of it free.  ``malloc_trim(0)`` returns the free pages inside every arena and the
main arena's top; the free top of a thread's arena it cannot return, which is why prompts are
tokenized on one thread (:data:`server.admission.TOKENIZER_THREAD`).
"""

from __future__ import annotations

import ctypes
import sys
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
