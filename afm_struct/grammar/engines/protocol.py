"""The interface between grammar engines and the sampling loop.

Two levels, as in vLLM's structured-output manager: a backend per tokenizer compiles grammars
(both take :class:`SchemaCompileOptions` per JSON Schema compile; the downgrade ladder in
``ladder.py`` is what the compiler drives); a :class:`Matcher` per sequence tracks state, fills
its row of the batch bitmask, accepts tokens and reports forced continuations.  The sampling
loop knows only these protocols.  The bitmask layout is one thing everywhere:
``(batch, ceil(vocab / 32))`` int32, bit ``t % 32`` of word ``t // 32`` set when token ``t`` is
allowed (llguidance's layout).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class SchemaCompileOptions:
    """What may vary between two JSON Schema compiles of one backend; the same type for every
    engine (what is fixed per compiler, such as whitespace, the backend takes when built).

    ``relaxed``: the relaxed rung, where keywords the engine cannot enforce are dropped rather
    than failing the compile (llguidance: ``lenient`` + ``coerce_one_of``; outlines-core drops
    them on every rung).  ``timeout_s``: the time left for this compile, for an engine that
    bounds its own compiles (outlines-core's child process); None means the configured limit.
    llguidance compiles on the caller's thread, which the ladder bounds, so it ignores it.
    """

    relaxed: bool = False
    timeout_s: float | None = None


EXACT_COMPILE = SchemaCompileOptions()
RELAXED_COMPILE = SchemaCompileOptions(relaxed=True)


class MatcherError(Exception):
    """A matcher failed in the middle of a generation: it rejected a token it had allowed, or
    its engine stopped while computing a mask or the forced tokens.

    ``detail`` is the engine's own words (parser state, the grammar): for the server log, never
    for the client.  ``over_limits`` is True when the engine stopped on its lexer or parser
    budgets (the grammar needs more work at this point than the engine allows), which the
    client can act on by simplifying the schema.
    """

    def __init__(self, what: str, detail: str, *, over_limits: bool = False, dead_end: bool = False) -> None:
        super().__init__(f"{what}: {detail}")
        self.what = what
        self.detail = detail
        self.over_limits = over_limits
        # No token can extend the text: the constraint admits no (further) output, which the
        # client can act on (the constraint is unsatisfiable), unlike an engine failure.
        self.dead_end = dead_end


def matcher_failure(matcher: Matcher, what: str, context: str = "", *,
                    dead_end: bool = False) -> MatcherError:
    """The :class:`MatcherError` for ``matcher``'s current failure (``what`` says which step
    failed, ``context`` e.g. the token it rejected; ``dead_end``: no token can follow, also
    when the engine says so itself)."""
    over = getattr(matcher, "over_limits", None)
    stuck = getattr(matcher, "dead_end", None)
    detail = matcher.error() or "no reason given"
    return MatcherError(what, f"{context}{': ' if context else ''}{detail}",
                        over_limits=bool(over is not None and over()),
                        dead_end=dead_end or bool(stuck is not None and stuck()))


def mask_words(vocab_size: int) -> int:
    """Number of int32 words per bitmask row for ``vocab_size`` tokens."""
    return (vocab_size + 31) // 32


def buffer_address(array: np.ndarray) -> int:
    """The address of ``array``'s first byte, where an engine writes a mask.

    Through ctypes' ``from_buffer`` (~0.3 µs) where the array is writable and C-contiguous:
    ``ndarray.ctypes.data`` builds a ctypes object each time (~1.5 µs, a sixth of a 10 µs
    mask at 128k tokens).  Other arrays (read-only, strided, empty) through ``ctypes.data``.
    """
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(array))
    except (TypeError, ValueError, BufferError):
        return int(array.ctypes.data)


def allocate_bitmask(batch: int, vocab_size: int) -> np.ndarray:
    """A zeroed ``(batch, words)`` int32 bitmask."""
    return np.zeros((batch, mask_words(vocab_size)), dtype=np.int32)


@dataclass(frozen=True)
class BatchFill:
    """How a matcher's mask can be filled together with other rows' in one engine call.

    ``fill(pairs, bitmask)`` writes the mask of each ``(handle, row)`` pair into that row of
    ``bitmask`` (``(rows, words)`` int32, C-contiguous), for every pair at once; ``fill`` is the
    same object for every matcher of an engine, so rows group by it.  It must leave a failed
    handle's row as the engine leaves it and report the failure through the matcher's
    ``error()``, never by raising for one row: the caller ends that row alone.
    """

    fill: Callable[[Sequence[Any], Any], None]
    handle: Any
    words: int


@runtime_checkable
class Matcher(Protocol):
    """Per-sequence grammar state."""

    def fill_mask(self, row: np.ndarray) -> None:
        """Write the allowed next tokens (EOS included when accepting) into ``row``: one
        contiguous int32 bitmask row of at least :func:`mask_words` words (extra words zeroed)."""

    def advance(self, token: int) -> bool:
        """Consume one sampled token; False if the grammar rejects it (the matcher is then stopped)."""

    def forced_tokens(self) -> list[int]:
        """Tokens the grammar forces from here (may be empty); not consumed."""

    def is_accepting(self) -> bool:
        """True when the text so far is a complete instance (EOS may follow)."""

    def is_finished(self) -> bool:
        """True when nothing but EOS can follow (generation should stop now)."""

    def error(self) -> str | None:
        """Why the matcher stopped, if it failed."""

    # Optional: ``batch_fill() -> BatchFill | None``, when the mask can be filled together
    # with other rows' in one engine call (the decode step does so; else ``fill_mask``).
    # Optional: ``accepts(tokens) -> int``, how many of ``tokens`` the grammar would take from
    # here without taking them (the closing search probes with it; without it, with forks).

    def fork(self) -> Matcher | None:
        """An independent copy at the same state, or None if the engine cannot copy one (the
        budget-aware closing searches completions on forks; without them it stays off)."""


@runtime_checkable
class CompiledGrammar(Protocol):
    """A compiled grammar: immutable, shared across requests, makes matchers."""

    backend: str

    def new_matcher(self) -> Matcher:
        """A fresh matcher at the start of the grammar."""
