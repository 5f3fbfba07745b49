"""What goes into the generator and what comes out: requests, usage, timings, events."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import mlx.core as mx

from ..errors import AfmError
from ..grammar.engine import Matcher
from .logprobs import TokenLogprob
from .reasoning import ReasoningTags
from .sampling import LogitsProcessor, SamplingParams


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
    # Break degenerate cycles (``0000…``) under a constraint, where a loop inside an unbounded
    # rule would otherwise run to max_tokens.
    loop_guard: bool = True
    # When max_tokens is about to cut a constrained output, spend the last tokens on the
    # shortest completion of the grammar, so the text parses (finish_reason stays "length").
    close_on_length: bool = True
    # Stop sequences also end text the grammar constrains (a json_schema answer: the client
    # asked for the cut).  False for tool requests: stop sequences end content, not a tool
    # call, whose arguments would otherwise be cut into invalid JSON (OpenAI's channels).
    stops_cut_grammar: bool = True
    reasoning: ReasoningTags | None = None  # thinking tags: the mask applies after the block
    # Token logprobs: None (off, free) or how many alternatives per token (0-20); the
    # TextDelta events then carry the entries of the tokens whose text they show.
    logprobs: int | None = None
    request_id: str = ""


@dataclass
class Usage:
    """Token counts (forced tokens count as completion tokens)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    forced_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens whose KV state came from the prefix cache

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
    """New output text (never a split UTF-8 character; never part of a stop sequence).

    With ``GenerationRequest.logprobs`` set, ``logprobs`` holds the entries of the tokens whose
    last visible character is in ``text`` (see :mod:`.logprobs`); otherwise it is None.
    """

    text: str
    logprobs: list[TokenLogprob] | None = None


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
