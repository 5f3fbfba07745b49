"""How prompts enter the decode batch: prefix reuse, prompts prefilled together, bounded slices.

A :class:`Prefiller` owns the admitted sequences that have not joined the decode batch yet and
the prefix cache.  Each scheduler iteration it runs a bounded amount of prefill
(``busy_prefill_budget`` prompt tokens while streams decode), so a long prompt cannot stall
running streams; a prompt starts from the longest cached prefix of a recent prompt; prompts
waiting together prefill in one ragged forward pass (one read of the weights), after their
shared prefix is computed once; a prompt that lacks only a few uncached tokens joins the batch
at once and feeds them in the batch's own pass (:meth:`Prefiller.join_short_tails`).

Failures are contained as in the decode step (:mod:`.failures`): a prompt's own grammar step
(its first mask) ends that prompt only; a forward pass ends the prompts it computed (a shared
prefix: every prompt that shares it; prompts prefilled together: those, also after their pass);
planning (the prefix-cache look-ups) ends the prompts it was for, or none when nothing was
decided yet; rows joining the batch whose cache fails to take them end with the batch's group
(:meth:`.DecodeBatch.end_group`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import mlx.core as mx

from ..turn.outputs import FinishReason
from .decode_batch import DecodeBatch
from .emit import fail, finish
from .failures import request_error
from .forward import Head, logits_at
from .host_argmax import take_row
from .next_mask import MaskFiller
from .prefix_cache import PrefixCache, common_prefix
from .ragged_pass import RaggedPass
from .sequence import SequenceState

PREFILL_CHUNK = 512

log = logging.getLogger("afm_struct")


def mark_prefilled(seq: SequenceState, now: float) -> None:
    """The whole prompt is in the cache: prefill time ends, and decoding starts, at ``now``."""
    seq.prefilled = len(seq.request.prompt_ids)
    seq.timings.prefill_s = now - seq.prefill_start
    seq.decode_start = now


class Prefiller:
    """The sequences waiting for (or part way through) prefill, and the steps that move them
    into the decode batch (see the module docstring)."""

    def __init__(self, model: Any, head: Head | None, make_cache: Callable[[], list[Any]],
                 batch: DecodeBatch, ragged: RaggedPass, fill_mask: MaskFiller,
                 *, prefill_budget: int, busy_prefill_budget: int, prefix_cache_size: int,
                 batch_prefill: bool, join_tail: int) -> None:
        self.model = model
        self.head = head
        self.make_cache = make_cache
        self.batch = batch
        self.cache_ops = batch.cache_ops
        self.ragged = ragged
        # Prefill's last chunk fills the first mask while its logits are computed.
        self.fill_mask = fill_mask
        self.prefill_budget = prefill_budget
        # While streams decode, an iteration prefills at most this many prompt tokens, so a
        # long prompt delays running streams by a bounded amount per token they produce.
        self.busy_prefill_budget = busy_prefill_budget
        # Recent prompts' KV state: a new prompt prefills only what it does not share.
        self.prefix_cache = PrefixCache(self.cache_ops, capacity=prefix_cache_size)
        # Prompts waiting together prefill in one forward pass (one read of the weights).
        self.batch_prefill = batch_prefill
        # A prompt with at most this many uncached tokens feeds them in the decode pass.
        self.join_tail = join_tail
        # Admitted sequences not in the decode batch yet, in arrival order.
        self.waiting: list[SequenceState] = []

    def enqueue(self, seq: SequenceState) -> None:
        """Admit ``seq`` to wait for prefill: in arrival order, except that a live prompt goes
        before the background ones (batch lines) that wait, so a batch cannot delay its prefill."""
        at = len(self.waiting)
        if not seq.request.background:
            at = next((i for i, s in enumerate(self.waiting) if s.request.background), at)
        self.waiting.insert(at, seq)

    def join_short_tails(self) -> None:
        """Waiting prompts whose uncached tail is short join the decode batch at once and feed
        that tail in the batch's next forward pass, instead of a forward pass of their own.

        With the prefix cache a repeated or extended prompt often lacks only a few tokens; a
        separate pass for them reads all the weights again (on the reference CPU a 1-row pass
        costs ~45 ms, while 8 rows feeding 2 tokens each cost what they cost feeding 1).
        """
        if self.join_tail <= 0:
            return
        for seq in list(self.waiting):
            if self.batch.full:
                return
            if seq.prefill_start or seq.cancel.is_set():
                continue
            prompt = seq.request.prompt_ids
            assert seq.cache is not None
            try:
                if not self.cache_ops.batchable(seq.cache):
                    continue
                if len(prompt) - self.prefix_cache.peek(prompt) > self.join_tail:
                    continue
                if seq.matcher is not None and seq.matcher.is_finished():
                    continue  # nothing to generate: the prefill path finishes it
                self._start_prefill(seq)
            except Exception as exc:  # this prompt's own step: it alone ends
                self.waiting.remove(seq)
                fail(seq, exc)
                continue
            seq.pending = prompt[seq.prefilled:]
            self.waiting.remove(seq)
            try:
                self.batch.join(seq)
            except Exception as exc:
                # Appending to the shared batch cache failed: the batch ended its rows and this
                # one (DecodeBatch.end_group); ``fail`` only makes sure it ended.
                fail(seq, exc)
                self.batch.drop_empty()

    def prefill_some(self) -> None:
        """A bounded slice of prefill: end cancelled waiters, compute a shared prefix once,
        prefill prompts together, then chunk through the rest in arrival order."""
        budget = self.busy_prefill_budget if self.batch.groups else self.prefill_budget
        for seq in [s for s in self.waiting if s.cancel.is_set()]:
            self.waiting.remove(seq)
            finish(seq, FinishReason.CANCELLED)
        budget -= self._prefill_shared_prefix(budget)
        try:
            together = self._pick_together(budget)
        except Exception:  # nothing changed yet: the prompts prefill one by one instead
            log.warning("could not pick prompts to prefill together", exc_info=True)
            together = []
        if together:
            try:
                budget -= self._prefill_together(together)
            except Exception as exc:  # the pass they shared: those prompts end
                err = request_error(exc, [seq.request.request_id for seq in together])
                for seq in together:
                    if seq in self.waiting:
                        self.waiting.remove(seq)
                    finish(seq, FinishReason.ERROR, error=err)
        for seq in list(self.waiting):
            if budget <= 0:
                break
            if self.batch.full and self.batch.groups:
                break
            try:
                budget -= self._prefill_chunk(seq, budget)
            except Exception as exc:  # this prompt's pass or its first mask: it alone ends
                if seq in self.waiting:
                    self.waiting.remove(seq)
                fail(seq, exc)
        # Prompts that ended once in the batch (a failure, a grammar complete at once) leave.
        self.batch.drop_done()

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
        waiting = [s for s in self.waiting if not s.prefill_start]
        if len(waiting) < 2:
            return 0
        try:
            if not self.cache_ops.batchable(waiting[0].cache):  # type: ignore[arg-type]
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
        except Exception as exc:  # planned and computed for every waiting prompt: those end
            err = request_error(exc, [seq.request.request_id for seq in waiting])
            for seq in waiting:
                self.waiting.remove(seq)
                finish(seq, FinishReason.ERROR, error=err)
            return 0
        return shared

    def _pick_together(self, budget: int) -> list[SequenceState]:
        """Waiting prompts to prefill in one forward pass (reading the weights once for all).

        Only whole prompts not started yet, in arrival order, while their (uncached) tokens fit
        the iteration's budget and the batch has room; fewer than two is not worth a batch.
        """
        if not self.batch_prefill:
            return []
        room = self.batch.max_rows - self.batch.size
        picked: list[SequenceState] = []
        for seq in self.waiting:
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
        cache = self.batch.new_cache([seq.cache for seq in seqs])  # type: ignore[misc]
        out = self.ragged(cache, feeds)
        mx.async_eval(out)
        failed: list[tuple[SequenceState, Exception]] = []
        for i, seq in enumerate(seqs):
            take_row(seq, out, i)
        # This prompt's grammar: it alone ends (after joining).
        self.fill_mask.fill_rows(seqs, lambda seq, exc: failed.append((seq, exc)))
        mx.eval(out)
        now = time.perf_counter()
        for i, seq in enumerate(seqs):
            prompt = seq.request.prompt_ids
            self.prefix_cache.store(prompt, self.cache_ops.extract(cache, i))
            mark_prefilled(seq, now)
            seq.cache = None
            self.waiting.remove(seq)
        self.batch.join_rows(seqs, cache)
        for seq, exc in failed:
            fail(seq, exc)
        for seq in seqs:
            try:
                if not seq.done and seq.matcher is not None and seq.matcher.is_finished():
                    finish(seq, FinishReason.STOP)
            except Exception as exc:
                fail(seq, exc)
        self.batch.drop_done()
        return sum(len(f) for f in feeds)

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
        seq.logits_row = None
        mx.async_eval(seq.logits)
        self.fill_mask(seq)
        mx.eval(seq.logits)
        self.prefix_cache.store(prompt, seq.cache)
        mark_prefilled(seq, time.perf_counter())
        self.waiting.remove(seq)
        self.batch.join(seq)
        if seq.matcher is not None and seq.matcher.is_finished():
            finish(seq, FinishReason.STOP)
            self.batch.drop_done()
        return remaining
