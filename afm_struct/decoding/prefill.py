"""How prompts enter the batch: prefix reuse, prompts prefilled together, bounded slices.

Mixed into :class:`~afm_struct.decoding.generator.Generator`, whose state these methods share:
each step ends with a bounded amount of prefill (``busy_prefill_budget`` prompt tokens while
streams decode), so a long prompt cannot stall running streams; a prompt starts from the
longest cached prefix of a recent prompt; prompts waiting together prefill in one ragged
forward pass (one read of the weights), after their shared prefix is computed once; a prompt
that lacks only a few uncached tokens feeds them in the decode batch's own pass.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import mlx.core as mx

from ..errors import AfmError, internal_error
from .forward import Head, logits_at
from .outputs import FinishReason
from .prefix_cache import common_prefix
from .sequence import BatchGroup, SequenceState

if TYPE_CHECKING:
    from .batch_cache import CacheOps
    from .prefix_cache import PrefixCache

PREFILL_CHUNK = 512


class Prefill:
    """The generator's prefill steps (see the module docstring)."""

    model: Any
    head: Head | None
    make_cache: Any
    cache_ops: CacheOps
    prefix_cache: PrefixCache
    groups: list[BatchGroup]
    prefilling: list[SequenceState]
    max_batch: int
    prefill_budget: int
    busy_prefill_budget: int
    batch_prefill: bool
    join_tail: int
    decoding: int
    spare_batch: list[Any] | None

    def _finish(self, seq: SequenceState, reason: FinishReason, *, error: AfmError | None = None,
                grammar_complete: bool | None = None) -> None:
        raise NotImplementedError

    def _fill_mask(self, seq: SequenceState) -> None:
        raise NotImplementedError

    def _ragged_pass(self, cache: list[Any], feeds: list[list[int]]) -> mx.array:
        raise NotImplementedError

    def _join_short_tails(self) -> None:
        """Waiting prompts whose uncached tail is short join the decode batch at once and feed
        that tail in the batch's next forward pass, instead of a forward pass of their own.

        With the prefix cache a repeated or extended prompt often lacks only a few tokens; a
        separate pass for them reads all the weights again (on the reference CPU a 1-row pass
        costs ~45 ms, while 8 rows feeding 2 tokens each cost what they cost feeding 1).
        """
        if self.join_tail <= 0:
            return
        for seq in list(self.prefilling):
            if self.decoding >= self.max_batch:
                return
            if seq.prefill_start or seq.cancel.is_set():
                continue
            prompt = seq.request.prompt_ids
            assert seq.cache is not None
            if not self.cache_ops.batchable(seq.cache):
                continue
            if len(prompt) - self.prefix_cache.peek(prompt) > self.join_tail:
                continue
            if seq.matcher is not None and seq.matcher.is_finished():
                continue  # nothing to generate: the prefill path finishes it
            self._start_prefill(seq)
            seq.pending = prompt[seq.prefilled:]
            self.prefilling.remove(seq)
            self._join(seq)

    def _tail_fed(self, seq: SequenceState) -> None:
        """A row that joined with its prompt's tail got its first logits."""
        seq.prefilled = len(seq.request.prompt_ids)
        now = time.perf_counter()
        seq.timings.prefill_s = now - seq.prefill_start
        seq.decode_start = now

    def _prefill_some(self) -> None:
        budget = self.busy_prefill_budget if self.groups else self.prefill_budget
        for seq in [s for s in self.prefilling if s.cancel.is_set()]:
            self.prefilling.remove(seq)
            self._finish(seq, FinishReason.CANCELLED)
        budget -= self._prefill_shared_prefix(budget)
        together = self._pick_together(budget)
        if together:
            try:
                budget -= self._prefill_together(together)
            except Exception as exc:
                err = exc if isinstance(exc, AfmError) else internal_error(
                    exc, [seq.request.request_id for seq in together])
                for seq in together:
                    if seq in self.prefilling:
                        self.prefilling.remove(seq)
                    self._finish(seq, FinishReason.ERROR, error=err)
        for seq in list(self.prefilling):
            if budget <= 0:
                break
            if self.decoding >= self.max_batch and self.groups:
                break
            try:
                budget -= self._prefill_chunk(seq, budget)
            except Exception as exc:
                self.prefilling.remove(seq)
                err = exc if isinstance(exc, AfmError) else internal_error(exc, [seq.request.request_id])
                self._finish(seq, FinishReason.ERROR, error=err)

    def _start_prefill(self, seq: SequenceState) -> None:
        """Start the clock and take the longest cached prefix of the prompt, if any."""
        seq.prefill_start = time.perf_counter()
        hit = self.prefix_cache.lookup(seq.request.prompt_ids)
        if hit is not None:
            seq.cache, seq.prefilled = hit.cache, hit.length
            seq.usage.cached_tokens = hit.length

    def _prefill_shared_prefix(self, budget: int) -> int:
        """Compute once the prefix that waiting prompts share and the prefix cache lacks.

        A burst of requests from one client shares its system turn, instructions and schema:
        prefilled once here, each prompt then prefills only its own tail.
        """
        if not self.batch_prefill or self.prefix_cache.capacity <= 0:
            return 0
        waiting = [s for s in self.prefilling if not s.prefill_start]
        if len(waiting) < 2 or not self.cache_ops.batchable(waiting[0].cache):  # type: ignore[arg-type]
            return 0
        fresh = [s.request.prompt_ids for s in waiting]
        shared = min(common_prefix(fresh[0], p) for p in fresh[1:])
        shared = min(shared, min(len(p) for p in fresh) - 1)
        if shared > min(budget, PREFILL_CHUNK) or shared <= self.prefix_cache.peek(fresh[0]):
            return 0
        if shared < self.prefix_cache.min_length:
            return 0
        prefix = fresh[0][:shared]
        cache = self.make_cache()
        self.model(mx.array([prefix]), cache=cache)
        mx.eval([c.state for c in cache])
        self.prefix_cache.store(prefix, cache)
        return shared

    def _pick_together(self, budget: int) -> list[SequenceState]:
        """Waiting prompts to prefill in one forward pass (reading the weights once for all).

        Only whole prompts not started yet, in arrival order, while their (uncached) tokens fit
        the step's budget and the batch has room; fewer than two is not worth a batch.
        """
        if not self.batch_prefill:
            return []
        room = self.max_batch - self.decoding if self.groups else self.max_batch
        picked: list[SequenceState] = []
        for seq in self.prefilling:
            if len(picked) >= room or seq.prefill_start or not self.cache_ops.batchable(seq.cache):
                break
            need = len(seq.request.prompt_ids) - self.prefix_cache.peek(seq.request.prompt_ids)
            if need > budget or need > PREFILL_CHUNK:
                break
            budget -= need
            picked.append(seq)
        return picked if len(picked) >= 2 else []

    def _prefill_together(self, seqs: list[SequenceState]) -> int:
        """One ragged forward pass over several prompts' uncached tokens; they join the batch."""
        for seq in seqs:
            self._start_prefill(seq)
        feeds = [seq.request.prompt_ids[seq.prefilled:] for seq in seqs]
        cache = self._new_batch([seq.cache for seq in seqs])  # type: ignore[misc]
        out = self._ragged_pass(cache, feeds)
        mx.async_eval(out)
        for i, seq in enumerate(seqs):
            seq.logits = out[i:i + 1]
            self._fill_mask(seq)
        mx.eval(out)
        now = time.perf_counter()
        for i, seq in enumerate(seqs):
            prompt = seq.request.prompt_ids
            self.prefix_cache.store(prompt, self.cache_ops.extract(cache, i))
            seq.prefilled, seq.cache = len(prompt), None
            seq.timings.prefill_s = now - seq.prefill_start
            seq.decode_start = now
            self.prefilling.remove(seq)
        self._join_batch(seqs, cache)
        for seq in seqs:
            if seq.matcher is not None and seq.matcher.is_finished():
                self._finish(seq, FinishReason.STOP)
        return sum(len(f) for f in feeds)

    def _join_batch(self, seqs: list[SequenceState], cache: list[Any]) -> None:
        """Rows prefilled together join the shared group (or become it)."""
        for g in self.groups:
            if g.shared:
                if not g.batched:
                    g.cache, g.batched = self._new_batch([g.cache]), True
                self.cache_ops.extend(g.cache, cache)
                g.rows.extend(seqs)
                return
        self.groups.append(BatchGroup(list(seqs), cache, shared=True, batched=True))

    def _prefill_chunk(self, seq: SequenceState, budget: int) -> int:
        """Process up to ``budget`` prompt tokens; on the last chunk the sequence joins a batch."""
        prompt = seq.request.prompt_ids
        if not seq.prefill_start:
            self._start_prefill(seq)
        remaining = len(prompt) - seq.prefilled
        n = min(remaining, budget, PREFILL_CHUNK)
        if n < remaining:
            self.model(mx.array([prompt[seq.prefilled:seq.prefilled + n]]), cache=seq.cache)
            mx.eval([c.state for c in seq.cache])
            seq.prefilled += n
            return n
        # The last chunk: its final position gives the first token's logits.
        seq.logits = logits_at(self.model, self.head, mx.array([prompt[seq.prefilled:]]), seq.cache)
        mx.async_eval(seq.logits)
        self._fill_mask(seq)
        mx.eval(seq.logits)
        self.prefix_cache.store(prompt, seq.cache)
        seq.prefilled = len(prompt)
        now = time.perf_counter()
        seq.timings.prefill_s = now - seq.prefill_start
        seq.decode_start = now
        self.prefilling.remove(seq)
        self._join(seq)
        if seq.matcher is not None and seq.matcher.is_finished():
            self._finish(seq, FinishReason.STOP)
        return remaining

    def _new_batch(self, seq_caches: list[list[Any]]) -> list[Any]:
        """A batch cache over sequence caches, with room for a full batch of rows: in the
        buffers of the last batch that emptied if they fit, else new ones reserved at once
        (growing row by row reallocated at every doubling: 40 ms to 1.9 s from 1 to 8 rows
        here, most of it page faults on fresh memory)."""
        spare, self.spare_batch = self.spare_batch, None
        batch = self.cache_ops.refill(spare, seq_caches) if spare is not None else None
        if batch is None:
            batch = self.cache_ops.batch_of(seq_caches)
            self.cache_ops.reserve_rows(batch, self.max_batch)
        return batch

    def _join(self, seq: SequenceState) -> None:
        assert seq.cache is not None
        if self.cache_ops.batchable(seq.cache):
            for g in self.groups:
                if g.shared:
                    if not g.batched:
                        g.cache, g.batched = self._new_batch([g.cache]), True
                    self.cache_ops.append(g.cache, seq.cache)
                    g.rows.append(seq)
                    seq.cache = None
                    return
            self.groups.append(BatchGroup([seq], seq.cache, shared=True))
            seq.cache = None
        else:
            self.groups.append(BatchGroup([seq], seq.cache, shared=False))
