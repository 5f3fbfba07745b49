"""The token generator: one thread steps every active sequence together (continuous batching).

A step (:meth:`Generator.step`) does, for each batch group:

1. stack the rows' pending next-token logits, apply logits processors and the grammar masks
   (one bitmask, a row per sequence, applied in one op, before any sampling filter), sample
   each row with its own seeded sampler;
2. advance each row's matcher and append the tokens the grammar forces (fast-forward), so a
   row may feed several tokens; emit their text; finished rows leave the batch at once;
3. launch one forward pass for the remaining rows (ragged runs are right-padded) without
   waiting for it, and meanwhile fill the next masks on the CPU.

Then a bounded slice of pending prompt prefill runs (:mod:`.prefill`: prefix reuse, prompts
prefilled together), so new requests join at the next step and a long prompt cannot stall
running streams for long.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import mlx.core as mx

from ..errors import AfmError, ContextOverflowError, internal_error
from ..grammar.closing import closing_vocab_for
from ..grammar.engine import allocate_bitmask
from .batch_cache import CacheOps, MLXCacheOps, cache_ops_for, fill_holes
from .closing import BudgetCloser
from .detokenizer import StreamingDetokenizer
from .events import (
    Constraint,
    Event,
    Finished,
    FinishReason,
    GenerationRequest,
    LanguageModel,
    TextDelta,
    Timings,
    Usage,
)
from .forward import calibrate_fixed_cost, logits_at, split_head
from .logprobs import TokenTrack, token_table
from .masking import allows_most, bitmask_allows_all, set_tokens
from .packed import Packing, enable_packing, packed_logits
from .prefill import PREFILL_CHUNK, Prefill
from .prefix_cache import PrefixCache
from .reasoning import ReasoningGate
from .sampling import make_logits_processors, make_loop_breaker, make_sampler
from .sequence import BatchGroup, SequenceState
from .step_sampling import sample_rows
from .stops import StopMatcher

# A packed ragged step feeds each row at most this many pending tokens (bounds a step's time
# when a row has a long forced run or prompt tail).
PACKED_FEED_MAX = 32

__all__ = ["Constraint", "Event", "FinishReason", "Finished", "GenerationRequest", "Generator",
           "LanguageModel", "TextDelta", "Timings", "Usage"]

class Generator(Prefill):
    """Owns the model; :meth:`step` advances every active sequence by one token (or run)."""

    def __init__(self, model: Any, tokenizer: Any, *, context_length: int,
                 make_cache: Callable[[], list[Any]], vocab_size: int | None = None,
                 max_batch: int = 8, prefill_budget: int = PREFILL_CHUNK,
                 busy_prefill_budget: int = 128, prefix_cache_size: int = 16,
                 batch_prefill: bool = True, join_tail: int = 4) -> None:
        self.model = model
        # Decoding needs logits at one position per row: the LM head runs on those rows only.
        self.head = split_head(model)
        self.tokenizer = tokenizer
        self.context_length = context_length
        self.make_cache = make_cache
        self.eos_ids = frozenset(tokenizer.eos_token_ids)
        self.vocab_size = vocab_size or tokenizer.vocab_size
        self.max_batch = max_batch
        self.prefill_budget = prefill_budget
        # While streams decode, a step prefills at most this many prompt tokens, so a long
        # prompt delays running streams by a bounded amount per token they produce.
        self.busy_prefill_budget = busy_prefill_budget
        self.cache_ops: CacheOps = cache_ops_for(model)
        # Ragged steps run packed (no padding through the per-position layers) where the
        # model's attention allows it; padded otherwise.
        self.packed = isinstance(self.cache_ops, MLXCacheOps) and enable_packing(model)
        # Recent prompts' KV state: a new prompt prefills only what it does not share.
        self.prefix_cache = PrefixCache(self.cache_ops, capacity=prefix_cache_size)
        # Prompts waiting together prefill in one forward pass (one read of the weights).
        self.batch_prefill = batch_prefill
        # A prompt with at most this many uncached tokens feeds them in the decode pass.
        self.join_tail = join_tail
        self.groups: list[BatchGroup] = []
        # The batch cache of the last group that emptied: the next batch reuses its memory.
        self.spare_batch: list[Any] | None = None
        self.prefilling: list[SequenceState] = []
        # Fill the next mask while MLX runs the forward pass; off only to measure the gain.
        self.overlap = True
        # Forward-pass cost model: fixed part in positions (None: measure on first need).
        self.fixed_positions: float | None = getattr(model, "fixed_cost_positions", None)
        # Called with the number of rows that just left a batch, before its next pass: the
        # scheduler admits arrivals there, so replacements ride that pass (join_wait.py).
        self.on_slots_freed: Callable[[int], None] | None = None

    @classmethod
    def from_loaded(cls, loaded: Any, **kwargs: Any) -> Generator:
        """A generator over a :class:`~afm_struct.models.LoadedModel`."""
        vocab = loaded.model.args.vocab_size if hasattr(loaded.model, "args") else None
        return cls(loaded.model, loaded.tokenizer, context_length=loaded.info.context_length,
                   make_cache=loaded.make_cache, vocab_size=vocab, **kwargs)

    # -- admission ---------------------------------------------------------------------------

    def max_tokens_for(self, request: GenerationRequest) -> int:
        """The effective max_tokens of ``request`` (capped by the context left after its prompt);
        raise :class:`ContextOverflowError` when the prompt is empty or fills the context."""
        n = len(request.prompt_ids)
        if n == 0:
            raise ContextOverflowError("the prompt is empty", param="messages")
        if n >= self.context_length:
            raise ContextOverflowError(
                f"the prompt has {n} tokens but the model's context is {self.context_length}; "
                "shorten the messages", param="messages")
        return min(request.params.max_tokens, self.context_length - n)

    def add(self, request: GenerationRequest, sink: Callable[[Event], None],
            cancel: threading.Event | None = None) -> None:
        """Admit a sequence; its events go to ``sink`` from the stepping thread."""
        max_tokens = self.max_tokens_for(request)
        params = request.params
        matcher = request.constraint.new_matcher() if request.constraint is not None else None
        if matcher is not None and request.reasoning is not None:
            matcher = ReasoningGate(matcher, self.tokenizer, request.reasoning)
        seq = SequenceState(
            request=request, sink=sink, cancel=cancel or threading.Event(), cache=self.make_cache(),
            sampler=make_sampler(params),
            processors=[*make_logits_processors(params), *request.logits_processors,
                        *([make_loop_breaker()] if matcher is not None and request.loop_guard else [])],
            matcher=matcher, detok=StreamingDetokenizer(self.tokenizer), stops=StopMatcher(params.stop),
            max_tokens=max_tokens, started=time.perf_counter())
        if matcher is not None and request.close_on_length:
            seq.closer = BudgetCloser(closing_vocab_for(self.tokenizer), self.vocab_size,
                                      self.tokenizer.decode)
        if request.logprobs is not None:
            seq.track = TokenTrack(request.logprobs, token_table(self.tokenizer))
        seq.usage.prompt_tokens = len(request.prompt_ids)
        self.prefilling.append(seq)

    @property
    def active(self) -> list[SequenceState]:
        """Every admitted, unfinished sequence (decoding or prefilling)."""
        return [r for g in self.groups for r in g.rows] + self.prefilling

    @property
    def decoding(self) -> int:
        """How many sequences are in the decode batch."""
        return sum(len(g.rows) for g in self.groups)

    @property
    def has_work(self) -> bool:
        """True while any sequence is active."""
        return bool(self.groups or self.prefilling)

    # -- stepping ----------------------------------------------------------------------------

    def step(self) -> None:
        """One decode step for every group, then a bounded slice of pending prefill."""
        self._join_short_tails()
        for group in list(self.groups):
            try:
                self._decode_group(group)
            except Exception as exc:  # a model failure ends the requests of this group only
                err = exc if isinstance(exc, AfmError) else internal_error(
                    exc, [seq.request.request_id for seq in group.rows])
                for seq in group.rows:
                    self._finish(seq, FinishReason.ERROR, error=err)
                group.rows = []
        for g in self.groups:
            if not g.rows and g.batched and g.shared:
                self.spare_batch = g.cache  # its buffers serve the next batch
        self.groups = [g for g in self.groups if g.rows]
        self._prefill_some()

    def _fill_mask(self, seq: SequenceState) -> None:
        """Compute the next-token mask on the CPU (overlaps the forward pass in flight)."""
        if seq.matcher is None:
            return
        t0 = time.perf_counter()
        if seq.mask is None:
            seq.mask = allocate_bitmask(1, self.vocab_size)
        row = seq.mask[0]
        row[:] = 0
        seq.matcher.fill_mask(row)
        # EOS policy lives here, not in each engine: any end-of-turn id iff the grammar accepts.
        set_tokens(row, self.eos_ids, seq.matcher.is_accepting())
        if seq.closer is not None:
            # Near max_tokens: the shortest completion takes over (decoding/closing.py).
            closing = seq.closer.before_sample(seq.matcher, seq.tokens, seq.max_tokens)
            if closing:
                row[:] = 0
                set_tokens(row, closing[:1], True)
        seq.mask_all = bitmask_allows_all(row, self.vocab_size)
        if not seq.request.stops_cut_grammar:
            seq.mask_free = seq.mask_all or allows_most(row, self.vocab_size)
        seq.timings.mask_s += time.perf_counter() - t0

    def _decode_group(self, group: BatchGroup) -> None:
        for seq in group.rows:
            if seq.cancel.is_set():
                self._finish(seq, FinishReason.CANCELLED)
        # Rows with logits sample now; rows still feeding a long forced run wait their turn.
        ready = [r for r in group.rows if not r.done and r.logits is not None]
        runs = []
        if ready:
            tokens, stats = sample_rows(ready)
            for seq, token, st in zip(ready, tokens, stats, strict=True):
                run = self._advance(seq, token)
                seq.pending = list(run)
                if seq.track is not None:
                    seq.track.decided(run, token, st)
                runs.append((seq, run))
        # Text goes out before the next forward pass, not after it: a client sees each token
        # one forward pass (a whole batch step) sooner, and a row a stop string ends leaves
        # the batch before that pass.
        for seq, run in runs:
            self._emit_run(seq, run)
        alive = [i for i, s in enumerate(group.rows) if not s.done and self._continues(s)]
        # Rows that ended (here, or by a stop string or cancel) leave the batch now.
        if len(alive) != len(group.rows):
            freed = len(group.rows) - len(alive)
            keep = fill_holes(alive)
            if keep and group.batched:
                self.cache_ops.filter(group.cache, keep)
            group.rows = [group.rows[i] for i in keep]
            if self.on_slots_freed is not None and group.shared and group.rows:
                self.on_slots_freed(freed)
                self._join_short_tails()
        going = group.rows
        if going:
            self._forward(group)
            for seq in going:
                if seq.logits is not None:
                    self._fill_mask(seq)  # on the CPU while the forward pass runs

    def _advance(self, seq: SequenceState, token: int) -> list[int]:
        """Feed the sampled token to the matcher; return it plus the forced run."""
        closer = seq.closer
        if closer is not None and (closer.closing is not None or token not in self.eos_ids):
            assert seq.matcher is not None
            instead = closer.review(seq.matcher, seq.tokens, token, seq.max_tokens)
            if instead is not None:  # the budget is spent on the grammar's shortest completion
                for t in instead:
                    if not seq.matcher.advance(t):
                        raise internal_error(f"completion token {t} rejected: {seq.matcher.error()}",
                                             [seq.request.request_id],
                                             what="the grammar rejected its own completion token")
                seq.tokens.extend(instead)
                seq.usage.completion_tokens = len(seq.tokens)
                return list(instead)
        if token in self.eos_ids:
            seq.eos = True
            return []
        run = [token]
        if seq.matcher is not None:
            if not seq.matcher.advance(token):
                # The engine's error is its parser state: for the log, not for the client.
                raise internal_error(f"token {token} rejected: {seq.matcher.error()}",
                                     [seq.request.request_id], what="the grammar rejected a token it allowed")
            if seq.request.fast_forward:
                budget = seq.max_tokens - len(seq.tokens) - 1
                forced = seq.matcher.forced_tokens()[:max(budget, 0)]
                for f in forced:
                    if not seq.matcher.advance(f):
                        raise internal_error(f"forced token {f} rejected: {seq.matcher.error()}",
                                             [seq.request.request_id],
                                             what="the grammar rejected its own forced token")
                run.extend(forced)
                seq.usage.forced_tokens += len(forced)
            if closer is not None:
                closer.advanced(run)
        seq.tokens.extend(run)
        seq.usage.completion_tokens = len(seq.tokens)
        return run

    def _continues(self, seq: SequenceState) -> bool:
        if seq.eos:
            return False
        if seq.matcher is not None and seq.matcher.is_finished():
            return False
        return len(seq.tokens) < seq.max_tokens

    def _forward(self, group: BatchGroup) -> None:
        """One forward pass feeding each row (a prefix of) its pending tokens.

        Rows whose pending tokens all fit get their next logits (at their last real position);
        the others keep the rest for the next step.
        """
        feed_len = self._feed_length([len(r.pending) for r in group.rows])
        # A row still feeding its prompt's tail feeds all of it: its first token waits on it.
        tails = [len(r.pending) for r in group.rows if not r.decode_start]
        feed_len = max([feed_len, *tails])
        feeds = [r.pending[:feed_len] for r in group.rows]
        out = self._ragged_pass(group.cache, feeds)
        if self.overlap:
            mx.async_eval(out)
        else:
            mx.eval(out)
        for i, (seq, fed) in enumerate(zip(group.rows, feeds, strict=True)):
            seq.pending = seq.pending[len(fed):]
            seq.logits = None if seq.pending else out[i:i + 1]
            if not seq.decode_start:
                self._tail_fed(seq)

    def _ragged_pass(self, cache: list[Any], feeds: list[list[int]]) -> mx.array:
        """One forward pass feeding row i ``feeds[i]``; ``(rows, V)`` logits at each row's last
        real position.  A ragged step runs packed where the model allows (``packed.py``), else
        shorter feeds are right-padded; either way the cache forgets padded positions after."""
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

    def _feed_length(self, lengths: list[int]) -> int:
        """How many pending tokens each row feeds this step.

        A forward pass costs about ``fixed + rows * length`` (in positions): its fixed part
        (reading the weights) is what fast-forward amortizes, but padding rows to the longest
        forced run costs compute.  Pick the length that maximizes useful tokens per cost.
        """
        longest = max(lengths)
        if len(lengths) == 1 or longest == 1 or len(set(lengths)) == 1:
            return longest
        if self.packed:  # a packed pass costs the tokens fed, not rows x longest
            return min(longest, PACKED_FEED_MAX)
        fixed = self.fixed_cost_positions()
        best, best_rate = 1, 0.0
        for cand in sorted(set(lengths)):
            rate = sum(min(n, cand) for n in lengths) / (fixed + len(lengths) * cand)
            if rate > best_rate:
                best, best_rate = cand, rate
        return best

    def warm_up(self) -> None:
        """Allocate (and touch) a full batch cache now, so that the first burst of requests
        reuses it instead of paying for fresh memory before its first token."""
        # Only mlx-lm caches hold memory worth reusing (scripted test models hold none).
        closing_vocab_for(self.tokenizer)  # built once per tokenizer (~0.5 s), not on a request
        if not isinstance(self.cache_ops, MLXCacheOps) or self.spare_batch is not None:
            return
        cache = self.make_cache()
        if not self.cache_ops.batchable(cache):
            return
        self.model(mx.zeros((1, 1), dtype=mx.int32), cache=cache)
        batch = self._new_batch([cache])
        mx.eval([getattr(b, "state", ()) for b in batch])
        self.spare_batch = batch

    def fixed_cost_positions(self) -> float:
        """The fixed cost of a forward pass, in positions (measured once on the model)."""
        if self.fixed_positions is None:
            self.fixed_positions = calibrate_fixed_cost(self.model, self.head, self.make_cache)
        return self.fixed_positions

    def _emit_run(self, seq: SequenceState, run: list[int]) -> None:
        """Emit the text of a sampled token and its forced run; finish the row if it ended."""
        # Without stops_cut_grammar, stop sequences end free text only: the first constrained
        # token (sampled under a mask that is not free text, or forced, or closing) begins a
        # tool call, and from there nothing is cut (inside a JSON string the mask is free
        # again, so the state is kept rather than judged per token).
        exempt = not seq.request.stops_cut_grammar and seq.matcher is not None
        for i, t in enumerate(run):
            text = seq.detok.add(t)
            if seq.track is not None:
                seq.track.text(text)
            if exempt and (i > 0 or not seq.mask_free):
                seq.stops_off = True
            if seq.stops_off:
                self._emit(seq, seq.stops.flush() + text)  # held text first, in order
                continue
            self._emit(seq, seq.stops.feed(text))
            if seq.stops.stopped:
                self._finish(seq, FinishReason.STOP)
                return
        if seq.closer is not None and seq.closer.closed:
            self._finish(seq, FinishReason.LENGTH)  # closed early by the budget: still a cut
        elif seq.eos:
            self._finish(seq, FinishReason.STOP, grammar_complete=True)
        elif seq.matcher is not None and seq.matcher.is_finished():
            self._finish(seq, FinishReason.STOP, grammar_complete=True)
        elif len(seq.tokens) >= seq.max_tokens:
            self._finish(seq, FinishReason.LENGTH)

    def _emit(self, seq: SequenceState, text: str, *, last: bool = False) -> None:
        if not text:
            return
        seq.text.append(text)
        if seq.track is None:
            seq.sink(TextDelta(text))
            return
        # The tokens whose text this shows (all the rest, once a stop string cut the text).
        final = last or seq.stops.stopped
        seq.sink(TextDelta(text, seq.track.emitted(len(text), final=final)))

    def _finish(self, seq: SequenceState, reason: FinishReason, *, error: AfmError | None = None,
                grammar_complete: bool | None = None) -> None:
        if seq.done:
            return
        seq.done = True
        # An end other than an error flushes the held text (a partial stop-string match, a split
        # character): it is output the client should see.
        flushes = reason in (FinishReason.STOP, FinishReason.LENGTH, FinishReason.CANCELLED)
        if flushes and not seq.stops.stopped:
            tail = seq.detok.flush()
            if seq.track is not None:
                seq.track.tail(tail)
            self._emit(seq, seq.stops.feed(tail))
            if not seq.stops.stopped:
                self._emit(seq, seq.stops.flush(), last=True)
        if seq.decode_start:
            seq.timings.decode_s = time.perf_counter() - seq.decode_start
        if seq.matcher is not None and grammar_complete is None:
            grammar_complete = seq.matcher.is_accepting()
        seq.logits = None
        seq.cache = None
        seq.sink(Finished(reason=reason, usage=seq.usage, timings=seq.timings, text="".join(seq.text),
                          error=error, grammar_complete=grammar_complete))

    # -- convenience -------------------------------------------------------------------------

    def generate(self, request: GenerationRequest,
                 cancel: threading.Event | None = None) -> Iterator[Event]:
        """Run one request to completion on the calling thread, yielding its events."""
        if self.has_work:
            raise RuntimeError("generate() needs an idle generator; use add()/step() to batch")
        events: list[Event] = []
        self.add(request, events.append, cancel)
        while self.has_work:
            self.step()
            yield from events
            events.clear()
        yield from events
