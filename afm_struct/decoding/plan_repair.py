"""A closing plan repaired after a token off it, without a search.

The budget closer (:mod:`.length_close`) holds ``plan``, the fewest tokens known to complete
the grammar from the current state.  When the model writes a token ``t`` that is not
``plan[0]``, the completion after ``t`` is most often the run the grammar forces after ``t``
followed by a tail of ``plan``: ``"`` where the plan had ``",`` (the comma is forced, then the
plan's rest), ``ti`` where the plan spelled ``title`` (``tle": "`` is forced), ``}"`` where it
had ``}`` then ``"``.  Trying the tails costs a few probes (a rejected token ~0.4 µs with
llguidance); a search costs hundreds of masks.  A tail is kept only after a fork of the matcher
walked it to a complete state, the same proof a search's result has, so a repaired plan is as
valid as a searched one; it is not always the shortest completion after ``t``.
"""

from __future__ import annotations

from ..grammar.closer.search import accepts, fork_of, is_complete
from ..grammar.engines.protocol import Matcher


def repaired_plan(matcher: Matcher, token: int, plan: list[int], room: int) -> list[int] | None:
    """The run forced after ``token`` then the shortest tail of ``plan`` that the grammar takes
    from there and ends complete in, if it fits ``room`` tokens (counted as the generator
    counts them: the forced run first); None when no tail does (search instead).  ``matcher``
    (before ``token``) is not touched."""
    probe = fork_of(matcher)
    if probe is None or not probe.advance(token):
        return None
    forced = probe.forced_tokens()
    if len(forced) > room or not all(probe.advance(t) for t in forced):
        return None
    for k in range(len(plan), -1, -1):  # shortest tail first
        tail = plan[k:]
        if len(forced) + len(tail) > room:
            return None
        if tail and not accepts(probe, tail):  # most tails fail at their first token
            continue
        end = fork_of(probe) if tail else probe
        if end is not None and all(end.advance(t) for t in tail) and is_complete(end):
            return forced + tail
    return None
