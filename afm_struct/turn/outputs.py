"""What comes out of a generation: text deltas, then one :class:`Finished` (reason, usage, timings).

These are the types the server reads (``server/run.py``, ``server/profile.py``, the
protocol encoders through :mod:`afm_struct.turn.events`), kept apart from :mod:`.events`
(requests, the model and constraint protocols) because this module imports no MLX: the wire
encoders and the profile stay importable, and testable, without loading the engine.
``tests/server/test_typed_seam.py`` holds that line.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from ..errors import AfmError


@dataclass(frozen=True)
class TopLogprob:
    """One alternative at a position: the token's text, id, logprob and UTF-8 bytes."""

    token: str
    id: int
    logprob: float
    bytes: tuple[int, ...]


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token: its logprob, its alternatives, and where its text lies.

    ``offset``/``end`` are character offsets of the token's text in the generation's output
    text (what :class:`Finished` ``.text`` holds); a token ending
    inside a multi-byte character shares the span of the token that completes it.
    ``sampled`` is False for forced and budget-closing tokens.  ``pressure``: the probability
    mass the grammar mask removed at the step that sampled it, when the request asked for
    token details (``afm_struct/decoding/constraint_pressure.py``; None otherwise, and for
    tokens not sampled).
    """

    token: str
    id: int
    logprob: float
    bytes: tuple[int, ...]
    top: tuple[TopLogprob, ...]
    offset: int = 0
    end: int = 0
    sampled: bool = True
    pressure: float | None = None


class FinishReason(enum.StrEnum):
    """Why a choice ended: the wire's ``finish_reason``.

    A :class:`enum.StrEnum`, so each member *is* its wire string: ``json.dumps`` writes ``"stop"``,
    f-strings print ``stop`` and ``reason == "stop"`` holds, so SSE and JSON bodies are byte for
    byte what bare strings gave.  The generator ends a sequence with STOP, LENGTH, CANCELLED or
    ERROR; TOOL_CALLS is the server's reading of a STOP that made tool calls.
    """

    STOP = "stop"              # EOS, a finished grammar or a stop sequence
    LENGTH = "length"          # max_tokens (also when the budget closed a constrained output)
    TOOL_CALLS = "tool_calls"  # a normal stop after one or more tool calls
    CANCELLED = "cancelled"    # cancelled by request ID or a client disconnect
    ERROR = "error"            # a failure after admission (the stream carries the error object)


@dataclass
class Usage:
    """Token counts (forced tokens count as completion tokens)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    forced_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens whose KV state came from the prefix cache
    # Completion tokens of the thinking block, from the one completing its open tag through
    # its close tag (counted as the turn reads them: decoding/emit.py read_token).
    reasoning_tokens: int = 0

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
    ``events``: the answer events the request's turn read in ``text``
    (:class:`afm_struct.turn.turn.Turn`: text, reasoning, tool calls), when it has one.
    """

    text: str
    logprobs: list[TokenLogprob] | None = None
    events: list[Any] | None = None


@dataclass
class Finished:
    """The end of a sequence: ``reason`` is STOP, LENGTH, CANCELLED or ERROR."""

    reason: FinishReason
    usage: Usage
    timings: Timings
    text: str
    error: AfmError | None = None
    grammar_complete: bool | None = None
    # LENGTH only: the budget ended the turn where the model's own text is a whole instance of
    # the grammar (it accepts there, and nothing was completed for it): after a tool call whose
    # successor could not fit, say.  A tool router ends such a turn with tool_calls.
    whole: bool = False
    # The answer events the request's turn held until the end (a partial tag, a call cut short).
    events: list[Any] | None = None
    # STOP only: the stop sequence that ended the text (None: EOS, a grammar, the turn).
    stop: str | None = None


GenerationEvent = TextDelta | Finished
