"""The token generator: one thread steps every active sequence together (continuous batching).

The scheduler drives each iteration as explicit phases (:meth:`Generator.step` runs them all
with no admission in between):

1. :meth:`~Generator.join_short_tails`: admitted prompts lacking only a few uncached tokens join
   the decode batch and will feed them in its next pass (:mod:`.prefill`);
2. :meth:`~Generator.sample_and_emit`, for each batch group: end cancelled rows, stack the
   rows' next-token logits, apply logits processors and the grammar masks (one bitmask, a row
   per sequence, applied in one op, before any sampling filter), sample each row with its own
   seeded sampler, advance each row's matcher and append the tokens the grammar forces
   (fast-forward), emit their text (:mod:`.emit`); finished rows leave the batch at once.  It
   returns how many rows left the shared group: the scheduler may admit replacements there
   (and join their tails again), so they ride the pass launched next (:mod:`.join_wait`);
3. :meth:`~Generator.launch_forward`, for each group: one forward pass for its rows (ragged
   runs packed or right-padded) launched without waiting for it, and meanwhile the next masks
   filled on the CPU;
4. :meth:`~Generator.prefill_some`: a bounded slice of pending prompt prefill, so new requests
   join at the next iteration and a long prompt cannot stall running streams for long.

Failures are contained (:mod:`.failures`): a failure in one row's own steps (its mask, sampler,
matcher advance, forced run, closing, emitting its text) ends that row only, and the other rows
go on exactly as without it; a failure of a step the group shares (its forward pass, the
stacked sampling, its masks filled in one call, a change of its batch cache:
:meth:`.DecodeBatch.end_group`) ends the requests of that group only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import mlx.core as mx

from ..errors import ContextOverflowError
from ..grammar.closer.completion import closing_vocab_for
from ..grammar.engines.protocol import matcher_failure
from ..turn.turn import Turn
from .batch_cache import CacheOps, MLXCacheOps, cache_ops_for
from .decode_batch import DecodeBatch
from .detokenizer import StreamingDetokenizer
from .emit import emit_runs, fail, finish, read_token
from .forward import calibrate_fixed_cost, feed_length, split_head
from .grammar_budget import GrammarBudget
from .host_argmax import take_row
from .length_close import BudgetCloser, known_shortest_output
from .logprobs import RowStats, TokenTrack, token_table
from .loop_mailbox import flush_held
from .next_mask import MaskFiller
from .packed import enable_packing
from .prefill import PREFILL_CHUNK, Prefiller, mark_prefilled
from .ragged_pass import RaggedPass
from .reasoning_gate import ReasoningGate
from .requests import (
    Constraint,
    Finished,
    FinishReason,
    GenerationEvent,
    GenerationRequest,
    LanguageModel,
    TextDelta,
    Timings,
    Usage,
)
from .sampling import make_logits_processors, make_loop_breaker, make_sampler
from .sequence import BatchGroup, SequenceState
from .step_sampling import sample_rows
from .stops import StopMatcher
from .tokenizer_parts import build_tokenizer_parts

if TYPE_CHECKING:
    from ..models.tokenizer import Tokenizer

__all__ = ["Constraint", "FinishReason", "Finished", "GenerationEvent", "GenerationRequest", "Generator",
           "LanguageModel", "TextDelta", "Timings", "Usage"]


class Generator:
    """Owns the model, the decode batch and the prefiller; its phases (see the module
    docstring) advance every active sequence by one token (or run) per iteration."""

    def __init__(self, model: Any, tokenizer: Tokenizer, *, context_length: int,
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
        self.cache_ops: CacheOps = cache_ops_for(model)
        # Ragged steps run packed (no padding through the per-position layers) where the
        # model's attention allows it; padded otherwise.
        packed = isinstance(self.cache_ops, MLXCacheOps) and enable_packing(model)
        self.ragged = RaggedPass(model, self.head, self.cache_ops, packed)
        self.fill_mask = MaskFiller(self.vocab_size, self.eos_ids)
        self.batch = DecodeBatch(self.cache_ops, max_batch)
        self.prefiller = Prefiller(model, self.head, make_cache, self.batch, self.ragged, self.fill_mask,
                                   prefill_budget=prefill_budget, busy_prefill_budget=busy_prefill_budget,
                                   prefix_cache_size=prefix_cache_size, batch_prefill=batch_prefill,
                                   join_tail=join_tail)
        # Fill the next mask while MLX runs the forward pass; off only to measure the gain.
        self.overlap = True
        # Forward-pass cost model: fixed part in positions (None: measure on first need).
        self.fixed_positions: float | None = getattr(model, "fixed_cost_positions", None)
        # A stand-in model whose forward time is spent asynchronously (afm_struct.testing)
        # says when its passes are done; a real model's arrays are waited on by MLX itself.
        self._settle: Callable[[], None] | None = getattr(model, "settle", None)

    @classmethod
    def from_loaded(cls, loaded: Any, **kwargs: Any) -> Generator:
        """A generator over a :class:`~afm_struct.models.LoadedModel`."""
        vocab = loaded.model.args.vocab_size if hasattr(loaded.model, "args") else None
        return cls(loaded.model, loaded.tokenizer, context_length=loaded.info.context_length,
                   make_cache=loaded.make_cache, vocab_size=vocab, **kwargs)

    # -- admission ---------------------------------------------------------------------------

    def max_tokens_for(self, request: GenerationRequest) -> int:
        """The effective max_tokens of ``request``: ``params.max_tokens``, lowered to the context
        left after the prompt when ``request.fit_to_context``.  Raise :class:`ContextOverflowError`
        (with the numbers, in OpenAI's words) when the prompt is empty or fills the context, or
        leaves less than a budget the caller asked for."""
        n = len(request.prompt_ids)
        if n == 0:
            raise ContextOverflowError("the prompt is empty", param="messages")
        context, asked = self.context_length, request.params.max_tokens
        if n >= context:
            raise ContextOverflowError(
                f"This model's maximum context length is {context} tokens. However, your messages "
                f"resulted in {n} tokens. Please reduce the length of the messages.", param="messages")
        if n + asked > context and not request.fit_to_context:
            raise ContextOverflowError(
                f"This model's maximum context length is {context} tokens. However, you requested "
                f"{n + asked} tokens ({n} in the messages, {asked} in the completion). Please reduce "
                "the length of the messages or completion.", param="messages")
        return min(asked, context - n)

    def add(self, request: GenerationRequest, sink: Callable[[GenerationEvent], None],
            cancel: threading.Event | None = None) -> None:
        """Admit a sequence (it waits for prefill); its events go to ``sink`` from the
        stepping thread."""
        max_tokens = self.max_tokens_for(request)
        params = request.params
        matcher = request.constraint.new_matcher() if request.constraint is not None else None
        tags = request.reasoning
        # The request's one turn: its text is read here, its gate reads its phase.
        turn = request.turn
        if turn is None and tags is not None:
            turn = Turn(tags, start_in_reasoning=tags.opened_in_prompt)
        watcher = None  # watches an unconstrained turn: a reasoning budget, an end text
        if matcher is not None and tags is not None:
            matcher = ReasoningGate(matcher, self.tokenizer, tags, turn)
        elif tags is not None and (tags.budget is not None or tags.ends):
            watcher = ReasoningGate(None, self.tokenizer, tags, turn)
        seq = SequenceState(
            request=request, sink=sink, cancel=cancel or threading.Event(), cache=self.make_cache(),
            sampler=make_sampler(params),
            processors=[*make_logits_processors(params), *request.logits_processors,
                        *([make_loop_breaker()] if matcher is not None and request.loop_guard else [])],
            matcher=matcher, detok=StreamingDetokenizer(self.tokenizer, request.hidden_token_ids),
            stops=StopMatcher(params.stop),
            max_tokens=max_tokens, started=time.perf_counter(), watcher=watcher, turn=turn,
            grammar=GrammarBudget(request.grammar_budget_s))
        if matcher is not None and request.close_on_length:
            table = token_table(self.tokenizer)
            start = None if tags is not None else known_shortest_output(request.constraint)  # (admission's)
            seq.closer = BudgetCloser(closing_vocab_for(self.tokenizer), self.vocab_size,
                                      self.tokenizer.decode, lambda t: bytes(table.lookup(t)[1]),
                                      limit_s=request.closing_budget_s, start=start)
        if request.logprobs is not None:
            seq.track = TokenTrack(request.logprobs, token_table(self.tokenizer))
        seq.usage.prompt_tokens = len(request.prompt_ids)
        self.prefiller.enqueue(seq)

    @property
    def active(self) -> list[SequenceState]:
        """Every admitted, unfinished sequence (decoding or prefilling)."""
        return self.batch.rows() + self.prefiller.waiting

    @property
    def decoding(self) -> int:
        """How many sequences are in the decode batch."""
        return self.batch.size

    @property
    def has_work(self) -> bool:
        """True while any sequence is active."""
        return bool(self.batch.groups or self.prefiller.waiting)

    # -- the phases --------------------------------------------------------------------------

    def step(self) -> None:
        """Every phase once, admitting nothing in between (tests, :meth:`generate`, benchmarks;
        the scheduler drives the phases itself to admit replacements mid-iteration)."""
        self.join_short_tails()
        self.sample_and_emit()
        self.launch_forward()
        self.prefill_some()

    def join_short_tails(self) -> None:
        """Waiting prompts whose uncached tail is short join the decode batch now and feed it
        in the batch's next pass (:meth:`Prefiller.join_short_tails`); run after admitting."""
        self.prefiller.join_short_tails()

    def sample_and_emit(self) -> int:
        """For every group: end cancelled rows, sample the rows whose logits are ready, advance
        their matchers (with any forced run), emit the text, and let finished rows leave.

        Returns how many rows left the shared group if it still has rows (else 0): the slots
        a replacement can take in the pass :meth:`launch_forward` launches next.
        """
        freed = 0
        for group in self.batch.groups:
            try:
                left = self._sample_group(group)
            except Exception as exc:  # a failure of the group's shared step ends its requests only
                self.batch.end_group(group, exc)
                continue
            if group.shared and group.rows:
                freed = left
        self.batch.drop_empty()
        return freed

    def launch_forward(self) -> None:
        """For every group: launch one forward pass feeding each row its pending tokens
        (without waiting for it), and fill the next masks on the CPU while it runs."""
        for group in self.batch.groups:
            if not group.rows:
                continue
            try:
                self._forward(group)
                # On the CPU while the forward pass runs: one bitmask for the group's rows,
                # filled in one call; a row whose grammar fails ends alone, a failure of the
                # call itself (the shared bitmask) ends the group as its pass would.
                # The group's bitmask is free again: its rows sampled from it before this pass.
                group.bitmask = self.fill_mask.fill_rows(
                    [seq for seq in group.rows if seq.logits is not None], fail, group.bitmask)
            except Exception as exc:  # a model failure ends the requests of this group only
                self.batch.end_group(group, exc)
        self.batch.drop_done()

    def prefill_some(self) -> None:
        """A bounded slice of pending prompt prefill (:meth:`Prefiller.prefill_some`)."""
        self.prefiller.prefill_some()

    # -- inside the phases -------------------------------------------------------------------

    def _sample_group(self, group: BatchGroup) -> int:
        """Sample and emit one group's rows; return how many rows left it."""
        for seq in group.rows:
            if seq.cancel.is_set():
                finish(seq, FinishReason.CANCELLED)
        # Rows with logits sample now; rows still feeding a long forced run wait their turn.
        ready = [r for r in group.rows if not r.done and r.logits is not None]
        first = [r for r in ready if not r.tokens and not r.request.background]
        if first and any(r.request.background for r in ready):
            # A live request's first token beside batch lines: sampled, sent and its loop woken
            # before the batch rows' sampling and grammar work (its TTFT; issue 42).
            emit_runs(self._sample_ready(first, group))
            flush_held()
            ready = [r for r in ready if r not in first]
        emit_runs(self._sample_ready(ready, group) if ready else [])
        alive = [i for i, s in enumerate(group.rows) if not s.done and self._continues(s)]
        # Rows that ended (here, or by a stop string or cancel) leave the batch now.
        left = len(group.rows) - len(alive)
        if left:
            self.batch.leave(group, alive)
        return left

    def _sample_ready(self, ready: list[SequenceState],
                      group: BatchGroup) -> list[tuple[SequenceState, list[int]]]:
        """Sample the ``ready`` rows (not empty) and advance their matchers; the runs to emit."""
        runs = []
        if self._settle is not None:
            self._settle()
        # Each row's own steps are its own: a failure there ends that row (fail), and the
        # others carry on as if it had never been in the batch.
        tokens, stats = sample_rows(ready, on_error=lambda i, exc: fail(ready[i], exc),
                                    bitmask=group.bitmask)
        for seq, token, st in zip(ready, tokens, stats, strict=True):
            if seq.done:
                continue
            try:
                t0 = time.perf_counter()
                searched = seq.closer.search_wall_s if seq.closer is not None else 0.0
                run = self._advance(seq, token, st)
                seq.pending = list(run)
                if seq.matcher is not None:  # the advance and forced run: grammar work
                    # (the closer's searches have a budget of their own: length_close.py)
                    closing = seq.closer.search_wall_s - searched if seq.closer is not None else 0.0
                    seq.grammar.charge(time.perf_counter() - t0 - closing, len(seq.tokens))
            except Exception as exc:
                fail(seq, exc)
                continue
            runs.append((seq, run))
        return runs

    def _advance(self, seq: SequenceState, token: int, stats: RowStats | None = None) -> list[int]:
        """Feed the sampled token to the matcher; return it plus the forced run.  Each token's
        text is read (:func:`read_token`: the request's turn reads it) as soon as the matcher
        took it, so the gate's next decision (the forced run, the next mask) reads the turn
        after it."""
        closer = seq.closer
        if closer is not None and (closer.closing is not None or token not in self.eos_ids):
            assert seq.matcher is not None
            instead = closer.review(seq.matcher, seq.tokens, token, seq.max_tokens)
            if instead is not None:  # the budget is spent on the grammar's shortest completion
                if seq.track is not None:
                    seq.track.decided(instead, token, stats)
                for i, t in enumerate(instead):
                    if not seq.matcher.advance(t):
                        raise matcher_failure(seq.matcher, "the grammar rejected its own completion token",
                                              f"token {t}")
                    read_token(seq, t, forced=i > 0)
                seq.tokens.extend(instead)
                seq.usage.completion_tokens = len(seq.tokens)
                return list(instead)
        if token in self.eos_ids:
            seq.eos = True
            return []
        run = [token]
        if seq.track is not None:
            seq.track.decided(run, token, stats)
        gate = seq.matcher if seq.matcher is not None else seq.watcher
        if gate is None:
            read_token(seq, token, forced=False)
        else:
            if not gate.advance(token):
                # The engine's error is its parser state: for the log, not for the client.
                raise matcher_failure(gate, "the grammar rejected a token it allowed", f"token {token}")
            read_token(seq, token, forced=False)
            if seq.request.fast_forward or seq.matcher is None:
                budget = seq.max_tokens - len(seq.tokens) - 1
                forced = gate.forced_tokens()[:max(budget, 0)]
                if gate.error() is not None:  # computing the forced run failed
                    raise matcher_failure(gate, "the grammar failed to compute its forced tokens")
                if seq.track is not None:
                    seq.track.decided(forced, token, None)
                for f in forced:
                    if not gate.advance(f):
                        raise matcher_failure(gate, "the grammar rejected its own forced token",
                                              f"token {f}")
                    read_token(seq, f, forced=True)
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
        try:
            if seq.matcher is not None and seq.matcher.is_finished():
                return False
            if seq.watcher is not None and seq.watcher.is_finished():
                return False
        except Exception as exc:  # this row's grammar: it alone ends
            fail(seq, exc)
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
        out = self.ragged(group.cache, feeds)
        if self.overlap:
            mx.async_eval(out)
        else:
            mx.eval(out)
        for i, (seq, fed) in enumerate(zip(group.rows, feeds, strict=True)):
            seq.pending = seq.pending[len(fed):]
            take_row(seq, None if seq.pending else out, i)
            if not seq.decode_start:  # a row that joined with its prompt's tail: prefilled now
                mark_prefilled(seq, time.perf_counter())

    def _feed_length(self, lengths: list[int]) -> int:
        """How many pending tokens each row feeds this step (:func:`feed_length`)."""
        return feed_length(lengths, packed=self.ragged.packed, fixed=self.fixed_cost_positions)

    # -- setup and convenience ---------------------------------------------------------------

    def warm_up(self) -> None:
        """Allocate (and touch) a full batch cache now, so that the first burst of requests
        reuses it instead of paying for fresh memory before its first token."""
        # Only mlx-lm caches hold memory worth reusing (scripted test models hold none).
        # What every request may need from the tokenizer, built once now, not on a request.
        build_tokenizer_parts(self.tokenizer)
        if not isinstance(self.cache_ops, MLXCacheOps) or self.batch.spare is not None:
            return
        cache = self.make_cache()
        if not self.cache_ops.batchable(cache):
            return
        self.model(mx.zeros((1, 1), dtype=mx.int32), cache=cache)
        batch = self.batch.new_cache([cache])
        mx.eval([getattr(b, "state", ()) for b in batch])
        self.batch.spare = batch

    def fixed_cost_positions(self) -> float:
        """The fixed cost of a forward pass, in positions (measured once on the model)."""
        if self.fixed_positions is None:
            self.fixed_positions = calibrate_fixed_cost(self.model, self.head, self.make_cache)
        return self.fixed_positions

    def generate(self, request: GenerationRequest,
                 cancel: threading.Event | None = None) -> Iterator[GenerationEvent]:
        """Run one request to completion on the calling thread, yielding its events."""
        if self.has_work:
            raise RuntimeError("generate() needs an idle generator; use add()/step() to batch")
        events: list[GenerationEvent] = []
        self.add(request, events.append, cancel)
        while self.has_work:
            self.step()
            yield from events
            events.clear()
        yield from events
