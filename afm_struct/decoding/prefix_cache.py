"""Reuse of prompt prefixes: the KV state of recent prompts, looked up by longest common prefix.

Requests to one server share long prompt prefixes: the chat template's system turn always, and
in an extraction pipeline the instructions and the schema too.  Prefill is compute-bound on a
CPU (every prompt token costs a position of the full model), and while a prompt prefills, the
streams already decoding wait.  So each finished prefill leaves a snapshot of its KV state here,
and a new sequence starts from the longest cached prefix of its prompt, prefilling only the rest
(as vLLM's automatic prefix caching and mlx-lm's server prompt cache do).

Positions are causal, so the state of a prefix does not depend on what follows it.  The one
difference is floating point: a prefix computed inside another prompt's forward pass may round
differently in its last bits than a fresh one (BLAS blocks rows by the size of the batch).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol


class PrefixOps(Protocol):
    """How to copy a sequence cache's first positions out and back in."""

    def snapshot(self, seq_cache: list[Any]) -> Any | None:
        """A frozen copy of ``seq_cache``'s content (None: this cache cannot be reused)."""

    def restore(self, snapshot: Any, length: int) -> list[Any]:
        """A fresh sequence cache holding the snapshot's first ``length`` positions."""


@dataclass
class PrefixHit:
    """A cache holding the first ``length`` tokens of a prompt."""

    cache: list[Any]
    length: int


class PrefixCache:
    """The KV snapshots of the last ``capacity`` prompts (LRU), shared by every sequence."""

    def __init__(self, ops: PrefixOps, *, capacity: int = 16, min_length: int = 8) -> None:
        self.ops = ops
        self.capacity = capacity
        self.min_length = min_length  # shorter matches are not worth a copy
        self._entries: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.reused_tokens = 0

    def lookup(self, prompt: list[int]) -> PrefixHit | None:
        """The longest cached prefix of ``prompt`` (at most ``len(prompt) - 1`` tokens, so the
        last position is always computed and yields the first token's logits)."""
        if self.capacity <= 0:
            return None
        best_key, best = None, 0
        with self._lock:
            for key in self._entries:
                n = common_prefix(key, prompt)
                if n > best:
                    best_key, best = key, n
            best = min(best, len(prompt) - 1)
            if best_key is None or best < self.min_length:
                return None
            self._entries.move_to_end(best_key)
            snapshot = self._entries[best_key]
            self.hits += 1
            self.reused_tokens += best
        return PrefixHit(self.ops.restore(snapshot, best), best)

    def peek(self, prompt: list[int]) -> int:
        """How many tokens of ``prompt`` :meth:`lookup` would reuse (no copy, no statistics)."""
        if self.capacity <= 0:
            return 0
        with self._lock:
            best = max((common_prefix(key, prompt) for key in self._entries), default=0)
        best = min(best, len(prompt) - 1)
        return best if best >= self.min_length else 0

    def store(self, prompt: list[int], seq_cache: list[Any]) -> None:
        """Remember the state of ``seq_cache`` after prefilling exactly ``prompt``."""
        if self.capacity <= 0 or len(prompt) < self.min_length:
            return
        snapshot = self.ops.snapshot(seq_cache)
        if snapshot is None:
            return
        key = tuple(prompt)
        with self._lock:
            self._entries[key] = snapshot
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


def common_prefix(a: tuple[int, ...] | list[int], b: list[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
