"""The next-token mask of one sequence, filled on the CPU while the forward pass runs.

Both the decode step (after launching a batch's pass) and prefill (after launching a prompt's
last chunk) fill masks, so the rule lives here once: the grammar's allowed tokens, end-of-turn
ids exactly when the grammar accepts, and near ``max_tokens`` the shortest completion instead.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from ..grammar.engine import allocate_bitmask, matcher_failure
from .masking import allows_most, bitmask_allows_all, set_tokens
from .sequence import SequenceState


class MaskFiller:
    """Fills ``seq.mask`` (a 1-row bitmask) for the sequence's next sampled token."""

    def __init__(self, vocab_size: int, eos_ids: Iterable[int]) -> None:
        self.vocab_size = vocab_size
        self.eos_ids = frozenset(eos_ids)

    def __call__(self, seq: SequenceState) -> None:
        """Compute the next-token mask of ``seq`` (nothing for an unconstrained sequence)."""
        if seq.matcher is None:
            return
        t0 = time.perf_counter()
        if seq.mask is None:
            seq.mask = allocate_bitmask(1, self.vocab_size)
        row = seq.mask[0]
        row[:] = 0
        seq.matcher.fill_mask(row)
        if seq.matcher.error() is not None:
            # An engine that fails while computing a mask leaves a mask of nothing (or EOS
            # only) and reports itself finished: that would end the row as a silent "stop".
            raise matcher_failure(seq.matcher, "the grammar failed to compute the next mask")
        # EOS policy lives here, not in each engine: any end-of-turn id iff the grammar accepts.
        set_tokens(row, self.eos_ids, seq.matcher.is_accepting())
        if seq.closer is not None:
            # Near max_tokens: the shortest completion takes over (decoding/closing.py).
            closing = seq.closer.before_sample(seq.matcher, seq.tokens, seq.max_tokens, row)
            if closing:
                row[:] = 0
                set_tokens(row, closing[:1], True)
        seq.mask_all = bitmask_allows_all(row, self.vocab_size)
        if not seq.request.stops_cut_grammar:
            seq.mask_free = seq.mask_all or allows_most(row, self.vocab_size)
        seq.timings.mask_s += time.perf_counter() - t0
