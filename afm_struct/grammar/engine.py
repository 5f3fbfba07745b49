"""The interface between grammar engines and the sampling loop.

Two levels, as in vLLM's structured-output manager: a :class:`GrammarBackend` per tokenizer
compiles grammars; a :class:`Matcher` per sequence tracks state, fills its row of the batch
bitmask, accepts tokens and reports forced continuations.  The sampling loop knows only these
protocols.  The bitmask layout is one thing everywhere: ``(batch, ceil(vocab / 32))`` int32,
bit ``t % 32`` of word ``t // 32`` set when token ``t`` is allowed (llguidance's layout).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np


def mask_words(vocab_size: int) -> int:
    """Number of int32 words per bitmask row for ``vocab_size`` tokens."""
    return (vocab_size + 31) // 32


def allocate_bitmask(batch: int, vocab_size: int) -> np.ndarray:
    """A zeroed ``(batch, words)`` int32 bitmask."""
    return np.zeros((batch, mask_words(vocab_size)), dtype=np.int32)


@runtime_checkable
class Matcher(Protocol):
    """Per-sequence grammar state."""

    def fill_mask(self, bitmask: np.ndarray, row: int) -> None:
        """Write the allowed next tokens (EOS included when accepting) into ``bitmask[row]``."""

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

    def fork(self) -> Matcher | None:
        """An independent copy at the same state, or None if the engine cannot copy one (the
        budget-aware closing searches completions on forks; without them it stays off)."""


@runtime_checkable
class CompiledGrammar(Protocol):
    """A compiled grammar: immutable, shared across requests, makes matchers."""

    backend: str

    def new_matcher(self) -> Matcher:
        """A fresh matcher at the start of the grammar."""


@runtime_checkable
class GrammarBackend(Protocol):
    """A grammar engine bound to one tokenizer."""

    name: str

    def compile_json_schema(self, schema: dict[str, Any], *, options: dict[str, Any]) -> CompiledGrammar:
        """Compile a JSON Schema; raise :class:`~afm_struct.errors.SchemaError` if unsupported."""

    def compile_regex(self, pattern: str) -> CompiledGrammar:
        """Compile a regular expression over the whole output."""

    def compile_lark(self, grammar: str) -> CompiledGrammar:
        """Compile a Lark grammar (llguidance dialect)."""
