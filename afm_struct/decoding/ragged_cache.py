"""A batch KV cache whose rows have their own lengths: ragged steps without moving the cache.

mlx-lm's ``BatchKVCache`` keeps rows right-aligned behind left padding.  A step where rows feed
different numbers of tokens (a grammar fast-forward in one row, one sampled token in another) is
right-padded and then rolled back into left padding: every layer's whole key and value buffer is
gathered again (about 70 ms for 8 rows x 30 layers on the reference machine, a third of a decode
step), and the left padding, which every later step attends over, only grows.

Here rows are left-aligned instead: row i holds its ``lengths[i]`` positions at ``[0, lengths[i])``
and writes a step's tokens at ``[lengths[i], lengths[i] + L)``.  The attention mask lets query j
of row i see keys ``k <= lengths[i] + j``, so a padded query's key is written but never seen by a
real query, and the next step overwrites it.  A ragged step then costs what a uniform step costs.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

STEP = 256  # capacity grows in multiples of this many positions, as in mlx-lm's caches


class RaggedKVCache:
    """One layer's keys and values for a batch of rows of different lengths."""

    def __init__(self, lengths: list[int], keys: mx.array | None = None,
                 values: mx.array | None = None) -> None:
        self.lengths = list(lengths)
        self.keys = keys
        self.values = values
        self._right_padding: list[int] | None = None

    # -- what mlx-lm's attention uses -----------------------------------------------------------

    @property
    def offset(self) -> mx.array:
        """Each row's position of its next token (RoPE offsets, read before the update)."""
        return mx.array(self.lengths)

    def make_mask(self, n: int, return_array: bool = False, window_size: int | None = None,
                  **_: Any) -> mx.array:
        """``(rows, 1, n, S)`` boolean mask: query j of row i sees keys up to ``lengths[i] + j``."""
        if window_size is not None:
            raise ValueError("sliding-window attention is not batchable with RaggedKVCache")
        span = max(self.lengths) + n
        limit = mx.array(self.lengths)[:, None, None, None] + mx.arange(n)[None, None, :, None]
        return mx.arange(span)[None, None, None, :] <= limit

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        """Write each row's ``L`` new positions after its own length; return keys and values up
        to the longest row's end."""
        rows, heads, n, _ = keys.shape
        end = max(self.lengths) + n
        self._reserve(end, keys, values)
        assert self.keys is not None and self.values is not None
        first = self.lengths[0]
        if all(x == first for x in self.lengths):
            self.keys[:, :, first:first + n, :] = keys
            self.values[:, :, first:first + n, :] = values
        else:
            at = mx.array(self.lengths)[:, None] + mx.arange(n)[None, :]
            at = mx.broadcast_to(at[:, None, :, None], keys.shape)
            self.keys = mx.put_along_axis(self.keys, at, keys, axis=2)
            at_v = mx.broadcast_to(at[..., :1], (rows, heads, n, values.shape[3]))
            self.values = mx.put_along_axis(self.values, at_v, values, axis=2)
        self.lengths = [x + n for x in self.lengths]
        return self.keys[:, :, :end, :], self.values[:, :, :end, :]

    def _reserve(self, end: int, keys: mx.array, values: mx.array) -> None:
        if self.keys is not None and end <= self.keys.shape[2]:
            return
        rows, heads, _, dk = keys.shape
        cap = -(-end // STEP) * STEP
        have = 0 if self.keys is None else self.keys.shape[2]
        grow_k = mx.zeros((rows, heads, cap - have, dk), keys.dtype)
        grow_v = mx.zeros((rows, heads, cap - have, values.shape[3]), values.dtype)
        if self.keys is None or self.values is None:
            self.keys, self.values = grow_k, grow_v
        else:
            self.keys = mx.concatenate([self.keys, grow_k], axis=2)
            self.values = mx.concatenate([self.values, grow_v], axis=2)

    # -- ragged steps -------------------------------------------------------------------------

    def prepare(self, *, right_padding: list[int] | None = None, **_: Any) -> None:
        """The next step's inputs are right-padded by this many tokens per row."""
        self._right_padding = list(right_padding) if right_padding else None

    def finalize(self) -> None:
        """After that step: padded positions do not count (the next step overwrites them)."""
        if self._right_padding is not None:
            self.lengths = [x - p for x, p in zip(self.lengths, self._right_padding, strict=True)]
            self._right_padding = None

    # -- rows joining and leaving ---------------------------------------------------------------

    @classmethod
    def merge(cls, caches: list[Any]) -> RaggedKVCache:
        """A batch over sequence caches (mlx-lm ``KVCache``s, possibly empty)."""
        lengths = [0 if c.keys is None else c.offset for c in caches]
        filled = [c for c in caches if c.keys is not None]
        if not filled:
            return cls(lengths)
        cap = -(-max(max(lengths), 1) // STEP) * STEP
        _, heads, _, dk = filled[0].keys.shape
        dv = filled[0].values.shape[3]
        dtype = filled[0].keys.dtype
        ks, vs = [], []
        for c, n in zip(caches, lengths, strict=True):
            if c.keys is None:
                ks.append(mx.zeros((1, heads, cap, dk), dtype))
                vs.append(mx.zeros((1, heads, cap, dv), dtype))
                continue
            pad = [(0, 0), (0, 0), (0, cap - n), (0, 0)]
            ks.append(mx.pad(c.keys[:, :, :n, :], pad))
            vs.append(mx.pad(c.values[:, :, :n, :], pad))
        return cls(lengths, mx.concatenate(ks), mx.concatenate(vs))

    def extend(self, other: RaggedKVCache) -> None:
        """Append ``other``'s rows."""
        if self.keys is None and other.keys is None:
            self.lengths += other.lengths
            return
        ref = self.keys if self.keys is not None else other.keys
        assert ref is not None
        ref_v = self.values if self.values is not None else other.values
        assert ref_v is not None
        cap = max(0 if c.keys is None else c.keys.shape[2] for c in (self, other))

        def padded(c: RaggedKVCache) -> tuple[mx.array, mx.array]:
            rows = len(c.lengths)
            if c.keys is None or c.values is None:
                return (mx.zeros((rows, ref.shape[1], cap, ref.shape[3]), ref.dtype),
                        mx.zeros((rows, ref.shape[1], cap, ref_v.shape[3]), ref_v.dtype))
            pad = [(0, 0), (0, 0), (0, cap - c.keys.shape[2]), (0, 0)]
            return mx.pad(c.keys, pad), mx.pad(c.values, pad)

        (k1, v1), (k2, v2) = padded(self), padded(other)
        self.keys, self.values = mx.concatenate([k1, k2]), mx.concatenate([v1, v2])
        self.lengths += other.lengths

    def filter(self, keep: list[int]) -> None:
        """Keep only rows ``keep``, in that order."""
        self.lengths = [self.lengths[i] for i in keep]
        if self.keys is not None and self.values is not None:
            idx = mx.array(keep)
            self.keys, self.values = self.keys[idx], self.values[idx]

    def extract(self, row: int) -> Any:
        """Row ``row`` as an mlx-lm ``KVCache`` (its own positions only)."""
        from mlx_lm.models.cache import KVCache

        cache = KVCache()
        n = self.lengths[row]
        if self.keys is not None and self.values is not None and n:
            cache.keys = mx.contiguous(self.keys[row:row + 1, :, :n, :])
            cache.values = mx.contiguous(self.values[row:row + 1, :, :n, :])
            cache.offset = n
        return cache

    # -- bookkeeping mlx-lm and the generator read --------------------------------------------

    @property
    def state(self) -> tuple[Any, ...]:
        """Arrays to evaluate."""
        return (self.keys, self.values)

    def size(self) -> int:
        """The longest row's length."""
        return max(self.lengths, default=0)

    def empty(self) -> bool:
        """True before any position is stored."""
        return self.keys is None

    @property
    def nbytes(self) -> int:
        """Bytes held by the key and value buffers."""
        if self.keys is None or self.values is None:
            return 0
        return self.keys.nbytes + self.values.nbytes
