"""Sampling parameters, seeded samplers and logits processors.

A processor is ``(tokens, logits) -> logits`` as in mlx-lm; ``tokens`` are the ids generated
so far.  Samplers carry their own PRNG key so that the same seed gives the same output however
many other requests run beside it.
"""

from __future__ import annotations

import math
import numbers
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx

LogitsProcessor = Callable[[Sequence[int], mx.array], mx.array]
Sampler = Callable[[mx.array], mx.array]

_NEG_INF = float("-inf")


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling settings (OpenAI names; 0 or 1.0 means 'off' for the filters)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    repetition_penalty: float = 1.0
    repetition_context: int = 64
    # OpenAI's additive penalties on the generated tokens: a token seen c times loses
    # c * frequency_penalty + presence_penalty (when c > 0) from its logit.
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    max_tokens: int = 256
    stop: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        from ..errors import InvalidRequestError

        for name, ok, why in _CHECKS:
            value = getattr(self, name)
            if not ok(value):
                raise InvalidRequestError(f"{name} {why}, got {value!r}", param=name,
                                          code="invalid_value")
        if not isinstance(self.stop, tuple | list) or not all(isinstance(s, str) for s in self.stop):
            raise InvalidRequestError(f"stop must be a sequence of strings, got {self.stop!r}",
                                      param="stop", code="invalid_value")
        if len(self.stop) > MAX_STOPS:
            raise InvalidRequestError(f"stop may hold at most {MAX_STOPS} sequences, got {len(self.stop)}",
                                      param="stop", code="invalid_value")


# Every generated token is scanned for every stop sequence on the one thread that steps all
# requests: 200k stops cost 230 ms a token, for everyone.  OpenAI allows 4.
MAX_STOPS = 16
# The seed is a 64-bit PRNG key (mx.random.key takes [0, 2**64); outside it raised a TypeError).
SEED_LIMIT = 2 ** 64
# Temperatures below this sample as greedy (as vLLM's epsilon): dividing float32 logits by less
# made them inf / NaN (1e-300 picked the least likely token).
MIN_TEMPERATURE = 1e-5
# A penalty outside this range scales seen tokens' float32 logits to inf or 0 / 0 (NaN).
REPETITION_PENALTY = (0.01, 100.0)
# OpenAI's range for presence_penalty and frequency_penalty.
ADDITIVE_PENALTY = (-2.0, 2.0)


def _integer(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _number(value: object) -> bool:
    """A finite real number (NaN and infinities would poison every logit they touch)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


_CHECKS: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("temperature", lambda v: _number(v) and v >= 0, "must be a finite number >= 0"),
    ("top_p", lambda v: _number(v) and 0 < v <= 1, "must be a number in (0, 1]"),
    ("top_k", lambda v: _integer(v) and v >= 0, "must be an integer >= 0 (0: off)"),
    ("min_p", lambda v: _number(v) and 0 <= v < 1, "must be a number in [0, 1)"),
    ("repetition_penalty", lambda v: _number(v) and REPETITION_PENALTY[0] <= v <= REPETITION_PENALTY[1],
     f"must be a number in [{REPETITION_PENALTY[0]}, {REPETITION_PENALTY[1]}]"),
    ("presence_penalty", lambda v: _number(v) and ADDITIVE_PENALTY[0] <= v <= ADDITIVE_PENALTY[1],
     f"must be a number in [{ADDITIVE_PENALTY[0]}, {ADDITIVE_PENALTY[1]}]"),
    ("frequency_penalty", lambda v: _number(v) and ADDITIVE_PENALTY[0] <= v <= ADDITIVE_PENALTY[1],
     f"must be a number in [{ADDITIVE_PENALTY[0]}, {ADDITIVE_PENALTY[1]}]"),
    ("repetition_context", lambda v: _integer(v) and v >= 1, "must be an integer >= 1"),
    ("max_tokens", lambda v: _integer(v) and v >= 1, "must be an integer >= 1"),
    ("seed", lambda v: v is None or (_integer(v) and 0 <= v < SEED_LIMIT),
     "must be an integer in [0, 2**64) or omitted (a random seed)"),
)


def apply_top_k(logits: mx.array, k: int) -> mx.array:
    """Keep the ``k`` largest logits of each row."""
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    kth = mx.sort(logits, axis=-1)[..., -k][..., None]
    return mx.where(logits >= kth, logits, _NEG_INF)


def apply_top_p(logits: mx.array, p: float) -> mx.array:
    """Keep the smallest set of tokens whose probability mass reaches ``p``."""
    if p >= 1.0:
        return logits
    probs = mx.softmax(logits, axis=-1)
    order = mx.argsort(-probs, axis=-1)
    sorted_probs = mx.take_along_axis(probs, order, axis=-1)
    # A token stays if the mass before it is still below p; the top token always stays (a p
    # below float32's smallest number compares as 0 and kept nothing: every draw was token 0).
    keep_sorted = (mx.cumsum(sorted_probs, axis=-1) - sorted_probs) < p
    keep_sorted = mx.logical_or(keep_sorted, mx.arange(keep_sorted.shape[-1]) == 0)
    inverse = mx.argsort(order, axis=-1)
    keep = mx.take_along_axis(keep_sorted, inverse, axis=-1)
    return mx.where(keep, logits, _NEG_INF)


def apply_min_p(logits: mx.array, min_p: float) -> mx.array:
    """Drop tokens whose probability is below ``min_p`` times the top token's."""
    if min_p <= 0.0:
        return logits
    logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    threshold = mx.max(logprobs, axis=-1, keepdims=True) + mx.log(mx.array(min_p))
    return mx.where(logprobs >= threshold, logits, _NEG_INF)


class RowSampler:
    """A sampler ``logits (B, V) -> tokens (B,)`` with its own seeded PRNG key.

    Split in two for logprobs: :meth:`distribution` gives the processed logits the draw uses
    (temperature and the top-k / top-p / min-p filters applied) and :meth:`draw` picks from
    them; ``sampler(logits)`` is exactly ``draw(distribution(logits))``, so asking for
    logprobs never changes which token a seed picks.  Greedy decoding (temperature 0) has no
    filters: its distribution is the logits as given (temperature 1), its draw the argmax.
    """

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        # Below MIN_TEMPERATURE the scaled logits overflow float32 (inf, NaN) long before
        # sampling differs from the argmax, its limit: such a request is greedy.
        self.greedy = params.temperature < MIN_TEMPERATURE
        self._key: mx.array | None = None
        if not self.greedy:
            seed = params.seed if params.seed is not None else random.getrandbits(63)
            self._key = mx.random.key(int(seed))

    def distribution(self, logits: mx.array) -> mx.array:
        """The logits the draw samples from (float32)."""
        logits = logits.astype(mx.float32)
        if self.greedy:
            return logits
        p = self.params
        logits = logits / p.temperature
        logits = apply_top_k(logits, p.top_k)
        logits = apply_top_p(logits, p.top_p)
        return apply_min_p(logits, p.min_p)

    def draw(self, processed: mx.array) -> mx.array:
        """One token per row from :meth:`distribution`'s output (advances the PRNG key)."""
        if self.greedy:
            return mx.argmax(processed, axis=-1)
        assert self._key is not None
        self._key, sub = mx.random.split(self._key)
        return mx.random.categorical(processed, key=sub)

    def __call__(self, logits: mx.array) -> mx.array:
        if self.greedy:  # no float32 copy: the argmax is the same
            return mx.argmax(logits, axis=-1)
        return self.draw(self.distribution(logits))


def make_sampler(params: SamplingParams) -> RowSampler:
    """A seeded sampler for ``params`` (see :class:`RowSampler`)."""
    return RowSampler(params)


def make_repetition_penalty(penalty: float, context: int = 64) -> LogitsProcessor:
    """CTRL-style penalty on the last ``context`` generated tokens."""

    def process(tokens: Sequence[int], logits: mx.array) -> mx.array:
        if not tokens:
            return logits
        recent = mx.array(sorted(set(tokens[-context:])))
        picked = logits[..., recent]
        picked = mx.where(picked < 0, picked * penalty, picked / penalty)
        logits[..., recent] = picked
        return logits

    return process


def make_additive_penalties(presence: float, frequency: float) -> LogitsProcessor:
    """OpenAI's presence and frequency penalties over the generated tokens: each token seen
    ``c`` times so far loses ``c * frequency + presence`` from its logit (negative values
    favour repeats).  The counts grow with the tokens, so a step costs the tokens it adds and
    the distinct tokens seen, not the whole text."""
    counts: dict[int, int] = {}
    read = 0

    def process(tokens: Sequence[int], logits: mx.array) -> mx.array:
        nonlocal read
        if len(tokens) < read:  # another sequence's tokens (never in a generator): recount
            counts.clear()
            read = 0
        for token in tokens[read:]:
            counts[token] = counts.get(token, 0) + 1
        read = len(tokens)
        if not counts:
            return logits
        ids = mx.array(list(counts))
        seen = mx.array(list(counts.values()), dtype=mx.float32)
        penalty = (seen * frequency + presence).astype(logits.dtype)
        logits[..., ids] = logits[..., ids] - penalty
        return logits

    # Before the first token it changes nothing (a greedy row may skip it then).
    process.idle = lambda tokens: not tokens  # type: ignore[attr-defined]
    return process


def find_loop(tokens: Sequence[int], *, max_period: int = 16, min_repeats: int = 3,
              min_span: int = 10) -> int | None:
    """The token that would continue a degenerate cycle at the end of ``tokens``, if any.

    A cycle is the last ``p`` tokens repeated at least ``min_repeats`` times and over at least
    ``min_span`` tokens (``0000…``, ``"Sales", "Sales", …``).
    """
    n = len(tokens)
    for period in range(1, max_period + 1):
        repeats = max(min_repeats, -(-min_span // period))
        span = period * repeats
        if span > n:
            break
        # (Called for every constrained row every step: the last token rules most periods out
        # with one comparison, and the rest compares two slices in C, where a generator over
        # the span cost ~70 µs a call.)
        if tokens[n - 1] != tokens[n - 1 - period]:
            continue
        if tokens[n - span + period:] == tokens[n - span:n - period]:
            return int(tokens[n - period])
    return None


def make_loop_breaker(penalty: float = 1e4) -> LogitsProcessor:
    """Push down the token that would continue a degenerate cycle.

    Greedy decoding of small models under a grammar can loop inside a rule with no length
    bound (digits, repeated array items) until ``max_tokens``.  A large finite penalty (not
    -inf) lets the grammar's other tokens win, yet keeps the token when it is the only one
    the mask allows.
    """

    def process(tokens: Sequence[int], logits: mx.array) -> mx.array:
        token = find_loop(tokens)
        if token is None:
            return logits
        logits[..., token] = logits[..., token] - penalty
        return logits

    # Most steps it changes nothing: a greedy row may then skip it and sample from its
    # allowed logits alone (step_sampling.py).
    process.idle = lambda tokens: find_loop(tokens) is None  # type: ignore[attr-defined]
    return process


def processors_idle(processors: Sequence[LogitsProcessor], tokens: Sequence[int]) -> bool:
    """True when none of ``processors`` would change the logits after ``tokens``: each says so
    through its ``idle(tokens)`` (a processor without one is assumed to change them)."""
    return all(getattr(p, "idle", _busy)(tokens) for p in processors)


def _busy(_tokens: Sequence[int]) -> bool:
    return False


def make_logits_processors(params: SamplingParams) -> list[LogitsProcessor]:
    """The processors implied by ``params`` (the grammar mask is added by the generator)."""
    out: list[LogitsProcessor] = []
    if params.repetition_penalty != 1.0:
        out.append(make_repetition_penalty(params.repetition_penalty, params.repetition_context))
    if params.presence_penalty or params.frequency_penalty:
        out.append(make_additive_penalties(params.presence_penalty, params.frequency_penalty))
    return out
