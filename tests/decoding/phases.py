"""Driving the generator's phases as the scheduler does, with a test's own refill.

The scheduler (``Scheduler._iterate``) admits replacements between ``sample_and_emit`` and
``launch_forward`` when rows left the shared group; tests put their own admission there.
"""

from __future__ import annotations

from collections.abc import Callable

from afm_struct.decoding.generator import Generator


def iterate(gen: Generator, refill: Callable[[int], None] | None = None,
            between: Callable[[], None] | None = None) -> None:
    """One iteration of the phases: ``refill(freed)`` (if given) where rows left the shared
    group, then prompt tails join the pass launched next; ``between()`` (if given) runs
    after ``sample_and_emit`` and again after the refill (a structure check)."""
    gen.join_short_tails()
    freed = gen.sample_and_emit()
    if between is not None:
        between()
    if freed and refill is not None:
        refill(freed)
        gen.join_short_tails()
        if between is not None:
            between()
    gen.launch_forward()
    gen.prefill_some()
