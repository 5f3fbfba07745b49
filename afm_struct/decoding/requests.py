"""What goes into the generator: requests and the model / constraint protocols.

What comes out (text deltas, :class:`Finished`, usage, timings, finish reasons) lives in
:mod:`.outputs`, which imports no MLX, and is re-exported here for the engine's own imports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import mlx.core as mx

from ..grammar.engines.protocol import Matcher
from ..turn.outputs import Finished, FinishReason, GenerationEvent, TextDelta, Timings, Usage
from .grammar_budget import DEFAULT_GRAMMAR_BUDGET_S
from .length_close import CLOSING_BUDGET_S
from .reasoning_gate import ReasoningTags
from .sampling import LogitsProcessor, SamplingParams

__all__ = [
    "Constraint",
    "FinishReason",
    "Finished",
    "GenerationEvent",
    "GenerationRequest",
    "LanguageModel",
    "TextDelta",
    "Timings",
    "Usage",
]


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
    # Seconds of grammar work (masks, advances, forced runs) the request may spend in all; over
    # it, it ends with grammar_too_complex (decoding/grammar_budget.py).  None: no bound.
    grammar_budget_s: float | None = DEFAULT_GRAMMAR_BUDGET_S
    # CPU seconds the closer's searches may spend; then it closes at the next chance
    # (decoding/length_close.py).  None: no bound.
    closing_budget_s: float | None = CLOSING_BUDGET_S
    # Stop sequences also end text the grammar constrains (a json_schema answer: the client
    # asked for the cut).  False for tool requests: stop sequences end content, not a tool
    # call, whose arguments would otherwise be cut into invalid JSON (OpenAI's channels).
    stops_cut_grammar: bool = True
    reasoning: ReasoningTags | None = None  # thinking tags: the mask applies after the block
    # The request's turn (afm_struct.turn.turn.Turn): the generator feeds it the text it
    # emits, its reasoning gate reads its phase, and the events it yields ride the TextDeltas.
    # None: the generator makes a plain one when ``reasoning`` is set.  One per generation.
    turn: Any = None
    # Token logprobs: None (off, free) or how many alternatives per token (0-20); the
    # TextDelta events then carry the entries of the tokens whose text they show.
    logprobs: int | None = None
    # Token details (the playground's per-token view): each sampled token's entry also
    # carries the constraint pressure, the mass its mask removed (constraint_pressure.py).
    # Needs ``logprobs`` set (the entries ride the logprob track); off: nothing is computed.
    token_details: bool = False
    # Tokens whose text is never shown (special tokens, markup no parser of this request reads:
    # decoding/hidden_tokens.py); empty shows every token's text.
    hidden_token_ids: frozenset[int] = frozenset()
    request_id: str = ""
    # True: params.max_tokens is a ceiling the context left after the prompt may lower (a
    # default); False: the caller asked for that many tokens, and a prompt that leaves fewer
    # is a ContextOverflowError, never a silently smaller budget (the server, when the request
    # sets max_tokens: as OpenAI and vLLM answer).
    fit_to_context: bool = True
    # Background work (a batch job's line): the scheduler starts and prefills live requests
    # before it, and counts live requests waiting for their first token apart
    # (:attr:`.scheduler.Scheduler.live_waiting`), so the batch runner holds back new lines.
    background: bool = False
