"""The sequences decoding together: their batch groups, how rows join and leave, spare memory.

Sequences whose caches batch (plain KV caches) share one group, the *shared* group, whose rows
are the rows of one batch cache; a sequence whose cache cannot batch (sliding windows,
state-space layers) decodes as a group of its own.  Prefill adds rows (:meth:`DecodeBatch.join`,
:meth:`DecodeBatch.join_rows`); the decode step removes finished ones (:meth:`DecodeBatch.leave`),
other phases the rows that ended in them (:meth:`DecodeBatch.drop_done`), and empty groups go
(:meth:`DecodeBatch.drop_empty`), keeping the last emptied batch cache so the
next batch is built in its buffers.

A failure while a group's batch cache changes (rows joining, rows leaving) leaves that cache
in an unknown state: every row of the group is concerned, and so are the rows joining it.
They all end with the error (:meth:`DecodeBatch.end_group`) and the group goes, its cache
not kept as the spare; rows of other groups and prompts still waiting go on untouched.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..turn.outputs import FinishReason
from .batch_cache import CacheOps, fill_holes
from .emit import finish
from .failures import request_error
from .sequence import BatchGroup, SequenceState


class DecodeBatch:
    """The decode batch's groups, its row limit and the spare batch cache."""

    def __init__(self, cache_ops: CacheOps, max_rows: int) -> None:
        self.cache_ops = cache_ops
        # At most this many sequences decode together (the scheduler sets its max_active).
        self.max_rows = max_rows
        self.groups: list[BatchGroup] = []
        # The batch cache of the last group that emptied: the next batch reuses its memory.
        self.spare: list[Any] | None = None

    @property
    def size(self) -> int:
        """How many sequences decode."""
        return sum(len(g.rows) for g in self.groups)

    @property
    def full(self) -> bool:
        """True when no more rows may join."""
        return self.size >= self.max_rows

    def rows(self) -> list[SequenceState]:
        """Every decoding sequence, group by group."""
        return [r for g in self.groups for r in g.rows]

    def new_cache(self, seq_caches: list[list[Any]]) -> list[Any]:
        """A batch cache over sequence caches, with room for a full batch of rows: in the
        buffers of the last batch that emptied if they fit, else new ones reserved at once
        (growing row by row reallocated at every doubling: 40 ms to 1.9 s from 1 to 8 rows
        here, most of it page faults on fresh memory)."""
        spare, self.spare = self.spare, None
        batch = self.cache_ops.refill(spare, seq_caches) if spare is not None else None
        if batch is None:
            batch = self.cache_ops.batch_of(seq_caches)
            self.cache_ops.reserve_rows(batch, self.max_rows)
        return batch

    def join(self, seq: SequenceState) -> None:
        """A prefilled sequence (its cache in ``seq.cache``) joins the shared group, or
        starts it, or decodes alone when its cache cannot batch."""
        assert seq.cache is not None
        if self.cache_ops.batchable(seq.cache):
            for g in self.groups:
                if g.shared:
                    with self._changing(g, [seq]):
                        self._batch(g)
                        self.cache_ops.append(g.cache, seq.cache)
                        g.rows.append(seq)
                    seq.cache = None
                    return
            self.groups.append(BatchGroup([seq], seq.cache, shared=True))
            seq.cache = None
        else:
            self.groups.append(BatchGroup([seq], seq.cache, shared=False))

    def join_rows(self, seqs: list[SequenceState], cache: list[Any]) -> None:
        """Rows prefilled together (``cache``, a batch cache) join the shared group (or
        become it)."""
        for g in self.groups:
            if g.shared:
                with self._changing(g, seqs):
                    self._batch(g)
                    self.cache_ops.extend(g.cache, cache)
                    g.rows.extend(seqs)
                return
        self.groups.append(BatchGroup(list(seqs), cache, shared=True, batched=True))

    def _batch(self, group: BatchGroup) -> None:
        """A lone row's plain cache becomes a batch cache when a second row joins."""
        if not group.batched:
            group.cache, group.batched = self.new_cache([group.cache]), True

    def leave(self, group: BatchGroup, alive: list[int]) -> None:
        """Only rows ``alive`` (ascending indices) of ``group`` stay."""
        keep = fill_holes(alive)
        if keep and group.batched:
            self.cache_ops.filter(group.cache, keep)
        group.rows = [group.rows[i] for i in keep]

    def drop_done(self) -> None:
        """Rows that ended outside the decode step (a row's failure while its mask was filled,
        a prefill that found the grammar complete) leave now; then empty groups go.  Never
        raises: a group whose cache fails to let them go ends (see the module docstring)."""
        for g in self.groups:
            alive = [i for i, s in enumerate(g.rows) if not s.done]
            if len(alive) < len(g.rows):
                try:
                    self.leave(g, alive)
                except Exception as exc:
                    self.end_group(g, exc)
        self.drop_empty()

    def end_group(self, group: BatchGroup, exc: BaseException,
                  joining: list[SequenceState] | None = None) -> None:
        """End every row of ``group`` (and ``joining``, rows on their way into it) with the
        error ``exc`` means for them: a step they share failed.  The group goes at the next
        :meth:`drop_empty`; its cache, in an unknown state, is not kept as the spare."""
        concerned = [*group.rows, *(s for s in joining or [] if s not in group.rows)]
        err = request_error(exc, [s.request.request_id for s in concerned])
        for seq in concerned:
            finish(seq, FinishReason.ERROR, error=err)
        group.rows = []
        group.broken = True

    @contextmanager
    def _changing(self, group: BatchGroup, joining: list[SequenceState]) -> Iterator[None]:
        """Around a change of ``group``'s batch cache: a failure ends the group's rows and
        ``joining`` (:meth:`end_group`), then is raised for the caller's own bookkeeping."""
        try:
            yield
        except Exception as exc:
            self.end_group(group, exc, joining)
            raise

    def drop_empty(self) -> None:
        """Remove groups without rows; an emptied shared batch cache becomes the spare."""
        if all(g.rows for g in self.groups):
            return
        for g in self.groups:
            if not g.rows and g.batched and g.shared and not g.broken:
                self.spare = g.cache  # its buffers serve the next batch
        self.groups = [g for g in self.groups if g.rows]
