"""What is derived from one tokenizer, kept with it: each part built once, on first use, shared.

A model's tokenizer feeds several structures that are costly to build and never change: the
llguidance tokenizer (its token trie; ~1 s for 49k tokens, ~10 s for 128k), the closing
search's candidate vocabulary (~0.3 s), the logprobs token table, the hidden-token sets and the
compilers (one per set of compile options, each holding its grammar cache).

The :class:`~afm_struct.models.tokenizer.Tokenizer` facade owns one :class:`DerivedParts`
(``tokenizer.derived``) and knows nothing of what goes in it: each part is built by the layer
that uses it, through one function of that layer keyed by the tokenizer (as llguidance's
factory holds the per-tokenizer parser state and vLLM's structured-output manager one backend
per tokenizer): ``ll_tokenizer_for`` and ``compiler_for`` (grammar), ``closing_vocab_for``
(grammar/closing), ``token_table`` and ``hidden_token_ids`` (decoding).  A part is built under
its own lock, exactly once, and freed with the tokenizer; there is no lookup by identity.
``builds`` counts the constructions of each part: what the tests check and
``benchmarks/masks/tokenizer_state.py`` reports.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

_Part = TypeVar("_Part")


class DerivedParts:
    """The structures derived from one tokenizer, by key; each built once, thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._part_locks: dict[Hashable, threading.Lock] = {}
        self._parts: dict[Hashable, Any] = {}
        self.builds: Counter[str] = Counter()

    def part(self, key: Hashable, name: str, build: Callable[[], _Part]) -> _Part:
        """The part stored under ``key``, built with ``build`` on first use (``name`` counts
        the build in :attr:`builds`)."""
        hit = self._parts.get(key)
        if hit is not None:
            return hit
        with self._lock:
            lock = self._part_locks.setdefault(key, threading.Lock())
        # A lock per part: concurrent first uses of one part wait for the one build, and a slow
        # build (a compiler for new options) never holds up another part (the decode thread's).
        with lock:
            hit = self._parts.get(key)
            if hit is None:
                hit = self._parts[key] = build()
                self.builds[name] += 1
            return hit

    def peek(self, key: Hashable) -> Any | None:
        """The part under ``key`` if built, else None (builds nothing)."""
        return self._parts.get(key)
