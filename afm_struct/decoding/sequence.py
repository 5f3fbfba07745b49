"""The state the generator keeps per sequence and per batch group (plain dataclasses)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
import numpy as np

from ..grammar.engines.protocol import Matcher
from ..turn.turn import Turn
from .detokenizer import StreamingDetokenizer
from .grammar_budget import GrammarBudget
from .length_close import BudgetCloser
from .logprobs import TokenTrack
from .reasoning_gate import ReasoningGate
from .requests import GenerationEvent, GenerationRequest, Timings, Usage
from .sampling import LogitsProcessor, RowSampler
from .stops import StopMatcher


@dataclass
class SequenceState:
    """One request being generated: its sampler, matcher, cache row and what it produced."""

    request: GenerationRequest
    sink: Callable[[GenerationEvent], None]
    cancel: threading.Event
    cache: list[Any] | None
    sampler: RowSampler
    processors: list[LogitsProcessor]
    matcher: Matcher | None
    detok: StreamingDetokenizer
    stops: StopMatcher
    max_tokens: int
    tokens: list[int] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    timings: Timings = field(default_factory=Timings)
    # The grammar time it spent, against the request's grammar_budget_s.
    grammar: GrammarBudget = field(default_factory=GrammarBudget)
    logits: mx.array | None = None  # (1, V) next-token logits, possibly still being computed
    # (batch logits (B, V), row, the slice that ``logits`` was made as): read together with the
    # batch's other rows on the host (host_argmax.py); stale once ``logits`` is set otherwise.
    logits_row: tuple[mx.array, int, mx.array] | None = None
    pending: list[int] = field(default_factory=list)  # decided tokens not yet fed to the model
    mask: np.ndarray | None = None  # (1, words) bitmask row of the next step
    mask_all: bool = True
    # The tokens ``mask`` allows, ascending, when they are few (next_mask.LIST_ALLOWED_MAX).
    mask_tokens: np.ndarray | None = None
    mask_free: bool = True  # the mask allows most tokens (free text), for stops_cut_grammar
    stops_off: bool = False  # a tool call began: stop sequences no longer apply
    prefilled: int = 0
    started: float = 0.0
    prefill_start: float = 0.0
    decode_start: float = 0.0
    eos: bool = False
    done: bool = False
    closer: BudgetCloser | None = None  # budget-aware closing (constrained, close_on_length)
    track: TokenTrack | None = None  # logprobs asked: pairs token entries with emitted text
    # Without a grammar: the turn's reasoning watcher (a ReasoningGate over no matcher), when
    # the request has a reasoning budget or the syntax ends turns by text.
    watcher: ReasoningGate | None = None
    # The request's turn (afm_struct.turn.turn.Turn): reads each token's emitted text as the
    # token is decided; its gate (``matcher`` or ``watcher``) reads its phase.
    turn: Turn | None = None
    # Text read this step, not sent yet: (text, the turn's events, last of the logprob spans).
    outbox: list[tuple[str, list[Any] | None, bool]] = field(default_factory=list)


@dataclass
class BatchGroup:
    """Rows that share one batch cache (row i of the cache is ``rows[i]``)."""

    rows: list[SequenceState]
    cache: list[Any]
    shared: bool  # True: a batchable group new sequences may join
    # A lone sequence keeps its plain cache (no padding masks); the batch cache is built
    # when a second sequence joins.
    batched: bool = False
    # The bitmask the rows' next masks are filled into, reused step after step (MaskFiller).
    bitmask: np.ndarray | None = None
    # A step the rows share failed while changing the cache: it is not reused as the spare.
    broken: bool = False
