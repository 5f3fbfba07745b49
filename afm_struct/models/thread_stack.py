"""Threads get a stack deep enough for the grammar engine.

llguidance builds a grammar recursively on the compiling thread's stack: a chain of rule
references overflows a small stack and kills the whole process (SIGSEGV, no exception).
:data:`~afm_struct.grammar.closer.lark_budget.MAX_RULE_DEPTH` bounds the chain, measured with
room on Linux's 8 MB default; but threads other than the main one get 512 KB on macOS (the
platform MLX serves), where a 450-rule chain, under that bound, crashes a compile thread.
So every thread started after ``import afm_struct`` gets at least :data:`MIN_STACK_BYTES`
(address space, committed only as used).  A larger size already set is kept.
"""

from __future__ import annotations

import threading

MIN_STACK_BYTES = 16 * 1024 * 1024


def ensure_thread_stack(min_bytes: int = MIN_STACK_BYTES) -> int:
    """Raise the stack size of threads started from now on to ``min_bytes`` (never lower it);
    returns the size in effect.  0 (the platform default) counts as too small: it is 512 KB
    for secondary threads on macOS."""
    current = threading.stack_size()
    if current < min_bytes:
        try:
            threading.stack_size(min_bytes)
        except (ValueError, RuntimeError):  # a platform that cannot set it: keep its default
            return current
        return min_bytes
    return current
