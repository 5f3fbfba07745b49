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

Rows join and leave without rebuilding the buffers either: the buffers keep spare rows (doubling
when full), a joining row is copied into a spare row, and a leaving row's place is taken by a
moved row (rows past the live ones are free).  Rebuilding an 8-row batch of the embedded model
(30 layers, 256 positions) by gather or concatenation took 30-65 ms, about a decode step.
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
        # Set for a packed step (see packed.py): attention gathers the packed tokens into
        # ``(rows, packing.longest)`` and the mask has that shape.
        self.packing: Any = None
        self._min_rows = 0  # rows to allocate at least (reserve_rows)

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
        if self.packing is not None:
            n = self.packing.longest  # the model passes the packed length; attention is padded
        span = max(self.lengths) + n
        limit = mx.array(self.lengths)[:, None, None, None] + mx.arange(n)[None, None, :, None]
        return mx.arange(span)[None, None, None, :] <= limit

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        """Write each row's ``L`` new positions after its own length; return keys and values up
        to the longest row's end."""
        rows, n = keys.shape[0], keys.shape[2]
        if rows != len(self.lengths):
            # A batch whose bookkeeping and inputs disagree would write rows into each other's
            # positions; fail loudly instead.
            raise RuntimeError(f"batch cache holds {len(self.lengths)} rows but the step feeds {rows}")
        end = max(self.lengths) + n
        self._reserve(rows, end, keys, values)
        assert self.keys is not None and self.values is not None
        first = self.lengths[0]
        if all(x == first for x in self.lengths):
            self.keys[:rows, :, first:first + n, :] = keys
            self.values[:rows, :, first:first + n, :] = values
        else:
            at = mx.array(self.lengths)[:, None] + mx.arange(n)[None, :]
            spare = self.keys.shape[0] - rows
            if spare:  # rows past the live ones are free: writing there is harmless
                at = mx.concatenate([at, mx.zeros((spare, n), at.dtype)])
                keys = mx.concatenate([keys, mx.zeros((spare, *keys.shape[1:]), keys.dtype)])
                values = mx.concatenate([values, mx.zeros((spare, *values.shape[1:]), values.dtype)])
            at_k = mx.broadcast_to(at[:, None, :, None], keys.shape)
            self.keys = mx.put_along_axis(self.keys, at_k, keys, axis=2)
            at_v = mx.broadcast_to(at[:, None, :, None], values.shape)
            self.values = mx.put_along_axis(self.values, at_v, values, axis=2)
        self.lengths = [x + n for x in self.lengths]
        return self.keys[:rows, :, :end, :], self.values[:rows, :, :end, :]

    def _reserve(self, rows: int, end: int, keys: mx.array, values: mx.array) -> None:
        """Room for ``rows`` rows of ``end`` positions (shapes and dtype taken from ``keys``
        and ``values``).  Rows grow by doubling, positions in steps of ``STEP``: each growth
        copies the buffers once."""
        _, heads, _, dk = keys.shape
        dv = values.shape[3]
        rows = max(rows, self._min_rows)
        if self.keys is None or self.values is None:
            cap = -(-max(end, 1) // STEP) * STEP
            self.keys = mx.zeros((rows, heads, cap, dk), keys.dtype)
            self.values = mx.zeros((rows, heads, cap, dv), values.dtype)
            return
        have_rows, _, have, _ = self.keys.shape
        if end > have:
            cap = -(-end // STEP) * STEP
            self.keys = mx.concatenate(
                [self.keys, mx.zeros((have_rows, heads, cap - have, dk), keys.dtype)], axis=2)
            self.values = mx.concatenate(
                [self.values, mx.zeros((have_rows, heads, cap - have, dv), values.dtype)], axis=2)
        if rows > have_rows:
            more = max(rows, 2 * have_rows, self._min_rows) - have_rows
            cap = self.keys.shape[2]
            self.keys = mx.concatenate([self.keys, mx.zeros((more, heads, cap, dk), keys.dtype)])
            self.values = mx.concatenate([self.values, mx.zeros((more, heads, cap, dv), values.dtype)])

    def reserve_rows(self, rows: int) -> None:
        """Make room for ``rows`` rows now (one allocation) rather than doubling as they join."""
        self._min_rows = max(self._min_rows, rows)
        if self.keys is not None and self.values is not None and self.keys.shape[0] < rows:
            self._reserve(rows, 0, self.keys, self.values)

    # -- ragged steps -------------------------------------------------------------------------

    def prepare(self, *, right_padding: list[int] | None = None, **_: Any) -> None:
        """The next step's inputs are right-padded by this many tokens per row."""
        self._right_padding = list(right_padding) if right_padding else None

    def prepare_packed(self, packing: Any, feeds: list[int]) -> None:
        """The next step is packed (``packing``); row i feeds ``feeds[i]`` real tokens."""
        self.packing = packing
        self._right_padding = [packing.longest - n for n in feeds]

    def finalize(self) -> None:
        """After that step: padded positions do not count (the next step overwrites them)."""
        self.packing = None
        if self._right_padding is not None:
            self.lengths = [x - p for x, p in zip(self.lengths, self._right_padding, strict=True)]
            self._right_padding = None

    # -- rows joining and leaving ---------------------------------------------------------------

    @classmethod
    def merge(cls, caches: list[Any]) -> RaggedKVCache:
        """A batch over sequence caches (mlx-lm ``KVCache``s, possibly empty)."""
        batch = cls([0] * len(caches))
        filled = [c for c in caches if c.keys is not None]
        if filled:
            longest = max(filled, key=lambda c: c.offset)
            batch._reserve(len(caches), longest.offset, longest.keys, longest.values)
        for i, c in enumerate(caches):
            batch.write_row(i, c)
        return batch

    def refill(self, caches: list[Any]) -> bool:
        """Become a batch over ``caches`` (sequence caches) in the buffers already held, if
        they fit; False (nothing changed) otherwise.  A batch that just emptied keeps its
        memory for the next one: fresh buffers for 8 rows cost page faults on ~94 MB, which
        landed on the first token of every request in a burst."""
        filled = [c for c in caches if c.keys is not None]
        if self.keys is None or self.values is None or self.keys.shape[0] < len(caches):
            return False
        if filled and (filled[0].keys.shape[1] != self.keys.shape[1]
                       or filled[0].keys.dtype != self.keys.dtype):
            return False
        self.lengths = [0] * len(caches)
        self.packing, self._right_padding = None, None
        for i, c in enumerate(caches):
            self.write_row(i, c)
        return True

    def append(self, cache: Any) -> None:
        """Add a sequence cache (mlx-lm ``KVCache``) as a new last row, copying its positions
        into a spare row (no one-row batch built first)."""
        self.lengths.append(0)
        self.write_row(len(self.lengths) - 1, cache)

    def write_row(self, row: int, cache: Any) -> None:
        """Copy sequence cache ``cache`` into row ``row`` (which must be free)."""
        n = 0 if cache.keys is None else cache.offset
        self.lengths[row] = n
        if n:
            self._reserve(len(self.lengths), n, cache.keys, cache.values)
            assert self.keys is not None and self.values is not None
            self.keys[row:row + 1, :, :n, :] = cache.keys[:, :, :n, :]
            self.values[row:row + 1, :, :n, :] = cache.values[:, :, :n, :]

    def extend(self, other: RaggedKVCache) -> None:
        """Append ``other``'s rows: only their positions are copied, into spare rows of the
        buffers (which double when full), so a row joining a batch costs a copy of that row."""
        n, k = len(self.lengths), len(other.lengths)
        if other.keys is None or other.values is None:
            self.lengths += other.lengths
            return  # empty rows: nothing to copy until their first step
        used = max(other.lengths)
        self._reserve(n + k, used, other.keys, other.values)
        assert self.keys is not None and self.values is not None
        if used:
            # Only ``other``'s live rows: its buffers may hold spare rows reserved for a full
            # batch (a batch prefilled together is built with room for max_batch rows).
            self.keys[n:n + k, :, :used, :] = other.keys[:k, :, :used, :]
            self.values[n:n + k, :, :used, :] = other.values[:k, :, :used, :]
        # Rows count only once their positions are in place, so a failed copy leaves the
        # batch as it was.
        self.lengths += other.lengths

    def filter(self, keep: list[int]) -> None:
        """Keep only rows ``keep``, in that order: row j becomes old row ``keep[j]``.

        Rows already in place stay where they are; only moved rows are copied (a caller that
        fills holes with rows from the end moves one row per row that left).
        """
        moves = [(j, src) for j, src in enumerate(keep) if src != j and self.lengths[src]]
        if moves and self.keys is not None and self.values is not None:
            # Copy the sources out first: an update that reads its own buffer cannot be done
            # in place and would copy every row.
            parts = [(j, mx.contiguous(self.keys[src:src + 1, :, :self.lengths[src], :]),
                      mx.contiguous(self.values[src:src + 1, :, :self.lengths[src], :]))
                     for j, src in moves]
            mx.eval([p[1:] for p in parts])
            for j, k, v in parts:
                self.keys[j:j + 1, :, :k.shape[2], :] = k
                self.values[j:j + 1, :, :v.shape[2], :] = v
        self.lengths = [self.lengths[i] for i in keep]

    def extract(self, row: int) -> Any:
        """Row ``row`` as an mlx-lm ``KVCache`` (its own positions only, copied now so the
        batch's buffers stay free to update in place)."""
        from mlx_lm.models.cache import KVCache

        cache = KVCache()
        n = self.lengths[row]
        if self.keys is not None and self.values is not None and n:
            cache.keys = mx.contiguous(self.keys[row:row + 1, :, :n, :])
            cache.values = mx.contiguous(self.values[row:row + 1, :, :n, :])
            cache.offset = n
            mx.eval(cache.keys, cache.values)
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
