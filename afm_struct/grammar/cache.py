"""A thread-safe LRU cache of compiled constraints.

Keys are built by the compiler from the request (compact JSON of the schema, in the caller's key
order: the grammar emits properties in that order), the compile options and the tokenizer
identity, so two tokenizers never share an entry.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

V = TypeVar("V")


class LRUCache(Generic[V]):
    """At most ``capacity`` entries; the least recently used one is evicted first."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(0, capacity)
        self._data: OrderedDict[str, V] = OrderedDict()
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

    def put(self, key: str, value: V) -> None:
        """Insert or refresh ``key``; evict beyond capacity."""
        if self.capacity == 0:
            return
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.capacity:
                self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        """Drop every entry (counters kept)."""
        with self._lock:
            self._data.clear()
