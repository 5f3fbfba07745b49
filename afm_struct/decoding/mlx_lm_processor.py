"""A logits processor for unmodified ``mlx_lm.generate`` / ``stream_generate``.

mlx-lm calls each processor as ``processor(tokens, logits)`` where ``tokens`` holds the prompt
and every token sampled so far.  The processor feeds the new tail to its matcher and masks the
logits with portable MLX ops, so it runs on CPU, CUDA and Metal alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import mlx.core as mx

from ..grammar.engines.protocol import allocate_bitmask, matcher_failure
from .generator import Constraint
from .masking import apply_bitmask, bitmask_allows_all, set_tokens

if TYPE_CHECKING:
    from ..models.tokenizer import Tokenizer


class GrammarLogitsProcessor:
    """Stateful: one instance per generation (it remembers where the prompt ended)."""

    def __init__(self, constraint: Constraint, eos_token_ids: frozenset[int] | set[int],
                 vocab_size: int) -> None:
        matcher = constraint.new_matcher()
        if matcher is None:
            raise ValueError("this constraint does not restrict tokens; no processor is needed")
        self.matcher = matcher
        self.eos_token_ids = frozenset(eos_token_ids)
        self.vocab_size = vocab_size
        self._seen: int | None = None
        self._bitmask = allocate_bitmask(1, vocab_size)

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        ids = tokens.tolist()
        if self._seen is None:  # the first call carries the prompt: nothing to consume
            self._seen = len(ids)
        for token in ids[self._seen:]:
            if token in self.eos_token_ids:
                continue
            if not self.matcher.advance(int(token)):
                raise ValueError(f"the grammar rejected token {token}: {self.matcher.error()}")
        self._seen = len(ids)
        row = self._bitmask[0]
        row[:] = 0
        if not self.matcher.is_finished():
            self.matcher.fill_mask(row)
            if self.matcher.error() is not None:  # an engine that stopped leaves an empty mask
                raise matcher_failure(self.matcher, "the grammar failed to compute the next mask")
        set_tokens(row, self.eos_token_ids, self.matcher.is_accepting())
        if bitmask_allows_all(row, self.vocab_size):
            return logits
        return apply_bitmask(logits, self._bitmask)


def make_mlx_lm_processor(constraint: Constraint,
                          tokenizer: Tokenizer) -> Callable[[mx.array, mx.array], mx.array]:
    """A processor for ``mlx_lm.generate(..., logits_processors=[...])``.

    ``tokenizer`` is afm-struct's :class:`~afm_struct.models.tokenizer.Tokenizer` (for EOS ids
    and the vocabulary size); make a new processor for every generation.
    """
    return GrammarLogitsProcessor(constraint, tokenizer.eos_token_ids, tokenizer.vocab_size)
