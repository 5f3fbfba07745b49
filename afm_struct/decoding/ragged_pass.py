"""One forward pass over rows that feed different numbers of tokens (a ragged pass).

The decode step feeds each row its pending tokens (one sampled token, or a forced run, or a
prompt tail that joined the batch); prompts prefilled together feed their uncached tokens.
Both go through :class:`RaggedPass`: packed where the model's attention allows it
(:mod:`.packed`: no padding through the per-position layers), else right-padded to the longest
feed; either way the batch cache forgets the padded positions afterwards.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from .batch_cache import CacheOps
from .forward import Head, logits_at
from .packed import Packing, packed_logits


class RaggedPass:
    """The model, its split LM head and cache operations, run as ragged passes."""

    def __init__(self, model: Any, head: Head | None, cache_ops: CacheOps, packed: bool) -> None:
        self.model = model
        self.head = head
        self.cache_ops = cache_ops
        self.packed = packed

    def __call__(self, cache: list[Any], feeds: list[list[int]]) -> mx.array:
        """Feed row i ``feeds[i]``; ``(rows, V)`` logits at each row's last real position
        (lazy: the caller decides when to evaluate)."""
        longest = max(len(f) for f in feeds)
        ragged = any(len(f) != longest for f in feeds)
        if ragged and self.packed:
            sizes = [len(f) for f in feeds]
            packing = Packing.of(sizes)
            self.cache_ops.prepare_packed(cache, packing, sizes)  # type: ignore[attr-defined]
            out = packed_logits(self.model, self.head, feeds, cache, packing)
            self.cache_ops.finalize(cache)
            return out
        if ragged:
            self.cache_ops.prepare(cache, [longest - len(f) for f in feeds])
        tokens = mx.array([f + [0] * (longest - len(f)) for f in feeds])
        out = logits_at(self.model, self.head, tokens, cache, [len(f) - 1 for f in feeds])
        if ragged:
            self.cache_ops.finalize(cache)
        return out
