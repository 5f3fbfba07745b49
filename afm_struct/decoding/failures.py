"""What a request gets when something fails in its own row, or in the group or prefill it is in.

The generator runs each row's grammar and sampling steps (mask, advance, forced tokens,
closing, the thinking gate, sampling, emitting text) on their own: a failure there ends that row
only, and the batch goes on.  A failure of a step shared by a group (its forward pass, a prefill
pass) ends the requests of that group.  Either way each request gets one error value: an
:class:`~afm_struct.errors.AfmError` raised on purpose passes through; a grammar engine that ran
out of its budgets is a :class:`~afm_struct.errors.GrammarLimitError` the client can act on
(simplify the schema); anything else is ``generation_failed``.  The engine's own words (parser
state, the grammar, a traceback) go to the server log under the request IDs, never to the
client.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ..errors import AfmError, GrammarLimitError, UnsatisfiableError, internal_error
from ..grammar.engines.protocol import MatcherError

log = logging.getLogger("afm_struct")


def request_error(exc: BaseException, request_ids: Sequence[str]) -> AfmError:
    """The client-facing error of ``request_ids`` for ``exc`` (logged with its details)."""
    if isinstance(exc, AfmError):
        return exc
    ids = ", ".join(i for i in request_ids if i) or "-"
    if isinstance(exc, MatcherError):
        if exc.over_limits:
            log.warning("%s, over the grammar engine's limits (request %s): %s", exc.what, ids,
                        exc.detail)
            return GrammarLimitError(
                "the output's constraint needs more work at this point than the grammar engine's "
                "limits allow (a pattern or literal that forces a very long run of text, or a "
                "grammar that is too ambiguous); simplify that part of the schema")
        if exc.dead_end:
            log.warning("%s (request %s): %s", exc.what, ids, exc.detail)
            return UnsatisfiableError(
                "the output's constraint allows no further text at this point: no output can "
                "satisfy it (a grammar rule that only refers to itself, a numeric range holding no "
                "multiple of multipleOf, text the model's tokenizer cannot write); fix the constraint")
        return internal_error(exc.detail, request_ids, what=exc.what)
    return internal_error(exc, request_ids)
