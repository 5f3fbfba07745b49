"""The one rule behind ``X-Grammar-Constraints: downgraded``.

A request is reported *downgraded* when the caller asked for strict output and it is served
below the exact rung of the ladder (relaxed grammar, generic JSON, or no mask at all).  Requests
that never asked for strict output (``json_object``, non-strict schemas and tools) are not
flagged whatever rung serves them: the header concerns strict requests only (docs/protocol.md).

Three places serve a request and must agree: a ``response_format`` compiled on its own
(``server/structured.py``), the same format run without its mask because a tool grammar owns it,
and each strict tool of a tool grammar (``afm_struct/tools/grammar.py``).  They all ask
:func:`is_downgraded`, so the rule is changed in one place.
"""

from __future__ import annotations

from .spec import Mode, Rung


def is_downgraded(strict: bool, served: Mode | Rung) -> bool:
    """True when a ``strict`` request is served below the exact rung.

    ``served`` is the rung that serves the request or, where only the compiler's verdict is at
    hand, its :class:`Mode` (the compiler reports ENFORCED exactly at the exact rung).  Both are
    string enums with distinct values, so one comparison covers either.
    """
    return strict and served not in (Rung.EXACT, Mode.ENFORCED)
