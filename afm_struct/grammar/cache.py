"""A thread-safe LRU cache of compiled constraints.

Keys are built by the compiler from the request (compact JSON of the schema, in the caller's key
order: the grammar emits properties in that order), the compile options and the tokenizer
identity, so two tokenizers never share an entry.

Entries may carry a weight (the compiler's: the estimated memory of the grammar an entry holds,
``compile_memory.py``): with ``max_weight`` the least recently used entries are also evicted
while the weights add up to more, so a few huge grammars cannot pin gigabytes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

V = TypeVar("V")


class LRUCache(Generic[V]):
    """At most ``capacity`` entries (weighing at most ``max_weight`` together, if given); the
    least recently used one is evicted first."""

    def __init__(self, capacity: int, max_weight: float | None = None) -> None:
        self.capacity = max(0, capacity)
        self.max_weight = max_weight
        self.weight = 0.0
        self._data: OrderedDict[str, V] = OrderedDict()
        self._weights: dict[str, float] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> V | None:
        """The entry for ``key`` (now most recent), or None."""
        with self._lock:
            value = self._data.get(key)
            if value is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: str, value: V, weight: float = 0.0) -> None:
        """Insert or refresh ``key`` (weighing ``weight``); evict beyond capacity or weight.
        An entry heavier than ``max_weight`` on its own is not kept."""
        if self.capacity == 0 or (self.max_weight is not None and weight > self.max_weight):
            return
        with self._lock:
            self.weight += weight - self._weights.get(key, 0.0)
            self._data[key] = value
            self._weights[key] = weight
            self._data.move_to_end(key)
            while len(self._data) > self.capacity or (
                    self.max_weight is not None and self.weight > self.max_weight):
                old, _ = self._data.popitem(last=False)
                self.weight -= self._weights.pop(old, 0.0)

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        """Drop every entry (counters kept)."""
        with self._lock:
            self._data.clear()
            self._weights.clear()
            self.weight = 0.0
