"""The token generator: one thread steps a set of sequences, each with its own state.

Per step and sequence: apply logits processors and the grammar mask (before any sampling
filter), sample, advance the matcher, launch the next forward pass asynchronously (with any
grammar-forced tokens appended: fast-forward), and, while MLX computes it, fill the next mask
on the CPU and turn tokens into text.  The loop is shaped for a batch; each sequence is
stepped with its own cache today and continuous batching replaces the inner forward later.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import mlx.core as mx
import numpy as np

from ..errors import AfmError, ContextOverflowError, GenerationError
from ..grammar.engine import Matcher, allocate_bitmask
from .detokenizer import StreamingDetokenizer
from .masking import apply_bitmask, bitmask_allows_all, set_tokens
from .reasoning import ReasoningGate, ReasoningTags
from .sampling import LogitsProcessor, SamplingParams, make_logits_processors, make_sampler
from .stops import StopMatcher

PREFILL_CHUNK = 512


class Constraint(Protocol):
    """What the generator needs of a compiled constraint."""

    def new_matcher(self) -> Matcher | None:
        """A fresh matcher, or None when the constraint does not restrict tokens."""


class LanguageModel(Protocol):
    """``model(tokens (B, L), cache=...) -> logits (B, L, V)`` plus a cache factory."""

    def __call__(self, inputs: mx.array, cache: Any = None) -> mx.array: ...


@dataclass
class GenerationRequest:
    """One sequence to generate."""

    prompt_ids: list[int]
    params: SamplingParams = field(default_factory=SamplingParams)
    constraint: Constraint | None = None
    logits_processors: list[LogitsProcessor] = field(default_factory=list)
    fast_forward: bool = True
    reasoning: ReasoningTags | None = None  # thinking tags: the mask applies after the block
    request_id: str = ""


@dataclass
class Usage:
    """Token counts (forced tokens count as completion tokens)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    forced_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


@dataclass
class Timings:
    """Wall-clock split of one generation."""

    queued_s: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    first_token_s: float | None = None
    mask_s: float = 0.0

    def rates(self, usage: Usage) -> tuple[float | None, float | None]:
        """(prefill tok/s, decode tok/s)."""
        pre = usage.prompt_tokens / self.prefill_s if self.prefill_s > 0 else None
        dec = usage.completion_tokens / self.decode_s if self.decode_s > 0 else None
        return pre, dec


@dataclass
class TextDelta:
    """New output text (never a split UTF-8 character; never part of a stop sequence)."""

    text: str


@dataclass
class Finished:
    """The end of a sequence: ``reason`` is stop, length, cancelled or error."""

    reason: str
    usage: Usage
    timings: Timings
    text: str
    error: AfmError | None = None
    grammar_complete: bool | None = None


Event = TextDelta | Finished


@dataclass
class _Sequence:
    request: GenerationRequest
    sink: Callable[[Event], None]
    cancel: threading.Event
    cache: list[Any]
    sampler: Callable[[mx.array], mx.array]
    processors: list[LogitsProcessor]
    matcher: Matcher | None
    detok: StreamingDetokenizer
    stops: StopMatcher
    max_tokens: int
    tokens: list[int] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    timings: Timings = field(default_factory=Timings)
    logits: mx.array | None = None  # next-token logits, possibly still being computed
    mask: np.ndarray | None = None
    mask_all: bool = True
    started: float = 0.0
    decode_start: float = 0.0
    done: bool = False


class Generator:
    """Owns the model; :meth:`step` advances every active sequence by one token (or run)."""

    def __init__(self, model: Any, tokenizer: Any, *, context_length: int,
                 make_cache: Callable[[], list[Any]], vocab_size: int | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.context_length = context_length
        self.make_cache = make_cache
        self.eos_ids = frozenset(tokenizer.eos_token_ids)
        self.vocab_size = vocab_size or tokenizer.vocab_size
        self.active: list[_Sequence] = []
        # Fill the next mask while MLX runs the forward pass; off only to measure the gain.
        self.overlap = True

    @classmethod
    def from_loaded(cls, loaded: Any) -> Generator:
        """A generator over a :class:`~afm_struct.models.LoadedModel`."""
        vocab = loaded.model.args.vocab_size if hasattr(loaded.model, "args") else None
        return cls(loaded.model, loaded.tokenizer, context_length=loaded.info.context_length,
                   make_cache=loaded.make_cache, vocab_size=vocab)

    # -- admission ---------------------------------------------------------------------------

    def check(self, request: GenerationRequest) -> int:
        """Validate ``request`` against the context; return the effective max_tokens."""
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
        max_tokens = self.check(request)
        params = request.params
        matcher = request.constraint.new_matcher() if request.constraint is not None else None
        if matcher is not None and request.reasoning is not None:
            matcher = ReasoningGate(matcher, self.tokenizer, request.reasoning)
        seq = _Sequence(
            request=request, sink=sink, cancel=cancel or threading.Event(), cache=self.make_cache(),
            sampler=make_sampler(params),
            processors=[*make_logits_processors(params), *request.logits_processors],
            matcher=matcher, detok=StreamingDetokenizer(self.tokenizer), stops=StopMatcher(params.stop),
            max_tokens=max_tokens, started=time.perf_counter())
        seq.usage.prompt_tokens = len(request.prompt_ids)
        self.active.append(seq)

    @property
    def has_work(self) -> bool:
        """True while any sequence is active."""
        return bool(self.active)

    # -- stepping ----------------------------------------------------------------------------

    def step(self) -> None:
        """Advance every active sequence once; finished ones leave the set."""
        for seq in list(self.active):
            try:
                if seq.cancel.is_set():
                    self._finish(seq, "cancelled")
                elif seq.logits is None:
                    self._prefill(seq)
                else:
                    self._decode(seq)
            except AfmError as exc:
                self._finish(seq, "error", error=exc)
            except Exception as exc:  # a model or matcher failure ends this request only
                self._finish(seq, "error", error=GenerationError(f"generation failed: {exc}"))
        self.active = [s for s in self.active if not s.done]

    def _forward(self, seq: _Sequence, tokens: Sequence[int]) -> mx.array:
        logits = self.model(mx.array([list(tokens)]), cache=seq.cache)
        return logits[:, -1, :]

    def _prefill(self, seq: _Sequence) -> None:
        start = time.perf_counter()
        prompt = seq.request.prompt_ids
        for i in range(0, len(prompt) - PREFILL_CHUNK, PREFILL_CHUNK):
            self.model(mx.array([prompt[i:i + PREFILL_CHUNK]]), cache=seq.cache)
            mx.eval([c.state for c in seq.cache])
        tail = prompt[(max(len(prompt) - 1, 0) // PREFILL_CHUNK) * PREFILL_CHUNK:]
        seq.logits = self._forward(seq, tail)
        mx.async_eval(seq.logits)
        self._fill_mask(seq)
        mx.eval(seq.logits)
        now = time.perf_counter()
        seq.timings.queued_s = start - seq.started
        seq.timings.prefill_s = now - start
        seq.decode_start = now
        if seq.matcher is not None and seq.matcher.is_finished():
            self._finish(seq, "stop")

    def _fill_mask(self, seq: _Sequence) -> None:
        """Compute the next-token mask on the CPU (overlaps the forward pass in flight)."""
        if seq.matcher is None:
            return
        t0 = time.perf_counter()
        if seq.mask is None:
            seq.mask = allocate_bitmask(1, self.vocab_size)
        row = seq.mask[0]
        row[:] = 0
        seq.matcher.fill_mask(seq.mask, 0)
        # EOS policy lives here, not in each engine: any end-of-turn id iff the grammar accepts.
        set_tokens(row, self.eos_ids, seq.matcher.is_accepting())
        seq.mask_all = bitmask_allows_all(row, self.vocab_size)
        seq.timings.mask_s += time.perf_counter() - t0

    def _decode(self, seq: _Sequence) -> None:
        logits = seq.logits
        assert logits is not None
        for proc in seq.processors:
            logits = proc(seq.tokens, logits)
        if seq.matcher is not None and not seq.mask_all:
            logits = apply_bitmask(logits, seq.mask)
        token = int(seq.sampler(logits).item())
        if seq.timings.first_token_s is None:
            seq.timings.first_token_s = time.perf_counter() - seq.started

        if token in self.eos_ids:
            self._finish(seq, "stop", grammar_complete=True)
            return
        run = [token]
        if seq.matcher is not None:
            if not seq.matcher.advance(token):
                raise GenerationError(f"the grammar rejected token {token}: {seq.matcher.error()}")
            if seq.request.fast_forward:
                budget = seq.max_tokens - len(seq.tokens) - 1
                forced = seq.matcher.forced_tokens()[:max(budget, 0)]
                for f in forced:
                    if not seq.matcher.advance(f):
                        raise GenerationError(f"the grammar rejected its own forced token {f}")
                run.extend(forced)
                seq.usage.forced_tokens += len(forced)
        seq.tokens.extend(run)
        seq.usage.completion_tokens = len(seq.tokens)

        grammar_done = seq.matcher is not None and seq.matcher.is_finished()
        out_of_budget = len(seq.tokens) >= seq.max_tokens
        if not (grammar_done or out_of_budget):
            seq.logits = self._forward(seq, run)
            if self.overlap:
                mx.async_eval(seq.logits)
            else:
                mx.eval(seq.logits)
            self._fill_mask(seq)  # on the CPU while the forward pass runs
        for t in run:
            self._emit(seq, seq.stops.feed(seq.detok.add(t)))
            if seq.stops.stopped:
                self._finish(seq, "stop")
                return
        if grammar_done:
            self._finish(seq, "stop", grammar_complete=True)
        elif out_of_budget:
            self._finish(seq, "length")

    def _emit(self, seq: _Sequence, text: str) -> None:
        if text:
            seq.text.append(text)
            seq.sink(TextDelta(text))

    def _finish(self, seq: _Sequence, reason: str, *, error: AfmError | None = None,
                grammar_complete: bool | None = None) -> None:
        if seq.done:
            return
        seq.done = True
        if reason in ("stop", "length", "cancelled") and not seq.stops.stopped:
            self._emit(seq, seq.stops.feed(seq.detok.flush()))
            if not seq.stops.stopped:
                self._emit(seq, seq.stops.flush())
        if seq.decode_start:
            seq.timings.decode_s = time.perf_counter() - seq.decode_start
        if seq.matcher is not None and grammar_complete is None:
            grammar_complete = seq.matcher.is_accepting()
        seq.logits = None
        seq.sink(Finished(reason=reason, usage=seq.usage, timings=seq.timings, text="".join(seq.text),
                          error=error, grammar_complete=grammar_complete))

    # -- convenience -------------------------------------------------------------------------

    def generate(self, request: GenerationRequest,
                 cancel: threading.Event | None = None) -> Iterator[Event]:
        """Run one request to completion on the calling thread, yielding its events."""
        if self.active:
            raise RuntimeError("generate() needs an idle generator; use add()/step() to batch")
        events: list[Event] = []
        self.add(request, events.append, cancel)
        while self.active:
            self.step()
            yield from events
            events.clear()
        yield from events
