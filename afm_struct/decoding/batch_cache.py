"""Batch KV caches: how sequences join, leave and take ragged multi-token steps together.

For mlx-lm models with plain ``KVCache`` layers the batch is a :class:`RaggedKVCache` per layer
(rows of their own lengths, left-aligned): a finished prefill joins with ``append`` (or
``extend`` for a batch prefilled together), finished rows leave with ``filter``, and a step
where rows feed different numbers of tokens (grammar fast-forward) is right-padded, announced
with ``prepare(right_padding=...)`` and settled by ``finalize()`` without moving the cache (or,
for llama-style attention, packed: see packed.py).  An emptied batch's memory is reused by the
next one (``refill``).  Models with other cache kinds (sliding windows, state-space layers) are
not batchable here; the generator then steps each of their sequences as a batch of one.
"""

from __future__ import annotations

from typing import Any, Protocol

from .ragged_cache import RaggedKVCache


class CacheOps(Protocol):
    """Operations the generator needs on a per-layer list of batch caches."""

    def batchable(self, seq_cache: list[Any]) -> bool:
        """True when this sequence's cache can join a shared batch."""

    def append(self, batch: list[Any], seq_cache: list[Any]) -> None:
        """``seq_cache``'s content joins ``batch`` as its last row (in place)."""

    def reserve_rows(self, batch: list[Any], rows: int) -> None:
        """Make room for ``rows`` rows now, before they join (no-op where nothing to allocate)."""

    def refill(self, spare: list[Any], seq_caches: list[list[Any]]) -> list[Any] | None:
        """A batch over ``seq_caches`` in the memory of ``spare`` (an emptied batch), or None."""

    def extend(self, batch: list[Any], other: list[Any]) -> None:
        """Append ``other``'s rows to ``batch`` (in place)."""

    def batch_of(self, seq_caches: list[list[Any]]) -> list[Any]:
        """One batch cache over several sequence caches (empty or not), row i = ``seq_caches[i]``."""

    def extract(self, batch: list[Any], row: int) -> list[Any]:
        """Row ``row`` of a batch cache as a sequence cache (padding dropped)."""

    def filter(self, batch: list[Any], keep: list[int]) -> None:
        """Keep only the rows ``keep`` (in order)."""

    def prepare(self, batch: list[Any], right_padding: list[int]) -> None:
        """Announce right padding for the next (ragged) forward pass."""

    def finalize(self, batch: list[Any]) -> None:
        """Settle that padding after the forward pass (padded positions stop counting)."""

    def snapshot(self, seq_cache: list[Any]) -> Any | None:
        """A frozen copy of a sequence cache's content, for prefix reuse (None: not reusable)."""

    def restore(self, snapshot: Any, length: int) -> list[Any]:
        """A fresh sequence cache holding the snapshot's first ``length`` positions."""


class MLXCacheOps:
    """:class:`CacheOps` over mlx-lm ``KVCache`` sequences batched as :class:`RaggedKVCache`."""

    def batchable(self, seq_cache: list[Any]) -> bool:
        """Only plain ``KVCache`` layers batch."""
        from mlx_lm.models.cache import KVCache

        return all(type(c) is KVCache for c in seq_cache)

    def batch_of(self, seq_caches: list[list[Any]]) -> list[Any]:
        """Layer-wise merge (empty sequence caches become empty rows)."""
        return [RaggedKVCache.merge(list(layer)) for layer in zip(*seq_caches, strict=True)]

    def extract(self, batch: list[Any], row: int) -> list[Any]:
        """Layer-wise ``extract``."""
        return [b.extract(row) for b in batch]

    def extend(self, batch: list[Any], other: list[Any]) -> None:
        """Layer-wise ``extend``."""
        for b, o in zip(batch, other, strict=True):
            b.extend(o)

    def filter(self, batch: list[Any], keep: list[int]) -> None:
        """Layer-wise ``filter``."""
        for b in batch:
            b.filter(keep)

    def prepare(self, batch: list[Any], right_padding: list[int]) -> None:
        """Layer-wise ``prepare(right_padding=...)``."""
        for b in batch:
            b.prepare(right_padding=right_padding)

    def refill(self, spare: list[Any], seq_caches: list[list[Any]]) -> list[Any] | None:
        """A batch over ``seq_caches`` in the buffers of ``spare`` (an emptied batch), or None
        when they do not fit (then build one with ``batch_of``)."""
        layers = list(zip(*seq_caches, strict=True))
        if len(layers) != len(spare) or not spare[0].refill(list(layers[0])):
            return None
        for b, layer in zip(spare[1:], layers[1:], strict=True):
            if not b.refill(list(layer)):
                return None
        return spare

    def append(self, batch: list[Any], seq_cache: list[Any]) -> None:
        """Layer-wise ``append``: a sequence joins as the last row."""
        for b, c in zip(batch, seq_cache, strict=True):
            b.append(c)

    def reserve_rows(self, batch: list[Any], rows: int) -> None:
        """Layer-wise ``reserve_rows``: room for ``rows`` rows before they join."""
        for b in batch:
            b.reserve_rows(rows)

    def prepare_packed(self, batch: list[Any], packing: Any, feeds: list[int]) -> None:
        """Layer-wise ``prepare_packed`` (a packed step: see packed.py)."""
        for b in batch:
            b.prepare_packed(packing, feeds)

    def finalize(self, batch: list[Any]) -> None:
        """Layer-wise ``finalize``."""
        for b in batch:
            b.finalize()

    def snapshot(self, seq_cache: list[Any]) -> Any | None:
        """Per layer, the keys and values up to the offset (MLX arrays are values: later
        writes to the live cache make new arrays and leave these as they are)."""
        from mlx_lm.models.cache import KVCache

        if not all(type(c) is KVCache and c.keys is not None for c in seq_cache):
            return None
        return [(c.keys[..., :c.offset, :], c.values[..., :c.offset, :]) for c in seq_cache]

    def restore(self, snapshot: Any, length: int) -> list[Any]:
        """Plain ``KVCache`` layers over the first ``length`` positions."""
        from mlx_lm.models.cache import KVCache

        caches = []
        for keys, values in snapshot:
            c = KVCache()
            c.keys, c.values, c.offset = keys[..., :length, :], values[..., :length, :], length
            caches.append(c)
        return caches


def cache_ops_for(model: Any) -> CacheOps:
    """The model's own cache operations if it has them (test models), else mlx-lm's."""
    ops = getattr(model, "cache_ops", None)
    return ops if ops is not None else MLXCacheOps()


def fill_holes(alive: list[int]) -> list[int]:
    """The new row order when only rows ``alive`` (ascending) stay: rows already inside the
    new length keep their place and rows past it fill the holes, so a batch cache moves one row
    per row that left instead of compacting every row behind it."""
    k = len(alive)
    kept = set(alive)
    holes = [j for j in range(k) if j not in kept]
    movers = [i for i in alive if i >= k]
    order = list(range(k))
    for hole, mover in zip(holes, movers, strict=True):
        order[hole] = mover
    return order
