"""A constraint whose language is empty from the start is refused before any stream starts.

``root ::= x; x ::= x``, or ``multipleOf: 0.1`` within [0.25, 0.35]: the first mask allows
nothing and the empty text is not an answer, so the request gets a 400 naming the constraint
(one that empties later is caught by the mask filler, decoding/next_mask.py).

Most grammars prove themselves non-empty cheaply: a fresh matcher takes one of the tokens a JSON
value starts with (``{``, ``[``, ``"``...), which means that token is in the first mask and the
parser has a way forward.  Only where none is taken is the first mask computed (~0.3 ms at a
128k vocabulary, the larger part of what the compile added to the engine's own build).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import UnsatisfiableError
from .engines.protocol import CompiledGrammar, mask_words

if TYPE_CHECKING:
    from .spec import ConstraintRequest

# Where a constraint of each kind sits in the request (the schema kinds carry their own param).
_EMPTY_PARAMS = {"regex": "pattern", "lark": "grammar"}


def first_mask_empty(grammar: CompiledGrammar, vocab_size: int) -> bool:
    """True when a fresh matcher of ``grammar`` allows no first token and is not complete, or
    stopped at a dead end while computing its first mask: the grammar's first mask's verdict."""
    matcher = grammar.new_matcher()
    row = np.zeros(mask_words(vocab_size), dtype=np.int32)
    matcher.fill_mask(row)
    stuck = getattr(matcher, "dead_end", None)
    return bool((stuck is not None and stuck()) or (not row.any() and not matcher.is_accepting()))


def language_empty(grammar: CompiledGrammar, vocab_size: int, opening: tuple[int, ...] = ()) -> bool:
    """:func:`first_mask_empty`, answered False without the mask when the grammar takes one of
    ``opening`` first (a grammar with ``takes_one_of``; the same verdict: a token the parser
    takes is in the first mask, so the mask is not empty and the parser not at a dead end)."""
    takes = getattr(grammar, "takes_one_of", None)
    if opening and takes is not None and takes(opening):
        return False
    return first_mask_empty(grammar, vocab_size)


def check_some_output(request: ConstraintRequest, grammar: CompiledGrammar | None, vocab_size: int,
                      opening: tuple[int, ...] = ()) -> None:
    """Raise a 400 naming the constraint when the language of ``grammar`` (compiled for
    ``request``) is empty from the start; ``opening``: tokens to try first (see module doc)."""
    if grammar is None or not language_empty(grammar, vocab_size, opening):
        return
    param: Any = _EMPTY_PARAMS.get(request.kind, getattr(request, "param", None))
    raise UnsatisfiableError(
        "no output satisfies the constraint (at $): its language is empty, e.g. a grammar rule "
        "that only refers to itself, or a numeric range that holds no multiple of multipleOf; "
        "fix the constraint", param=param)
