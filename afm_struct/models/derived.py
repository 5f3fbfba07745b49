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

Parts that are a function of the vocabulary alone and never change (llguidance's tokenizer, the
closing vocabulary) are asked for with ``shared=True``: two tokenizers whose vocabularies are
identical (a model's bf16 and 4-bit builds, the tokenizer-only and the full load of one model,
two servers in one process) then share one build, found by a fingerprint of the serialized
vocabulary (:func:`shared_part`).  Those seconds are paid once per vocabulary, not per load; the
parts of the most recent :data:`SHARED_VOCABULARIES` vocabularies stay built.  Compilers and
their grammar caches stay per tokenizer (a compiled constraint names its tokenizer).
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

_Part = TypeVar("_Part")


# How many vocabularies' shared parts stay built (a process rarely holds more than one or two
# vocabularies; each costs tens of MB at 200k tokens).
SHARED_VOCABULARIES = 3
_shared_lock = threading.Lock()
_shared_builds: dict[tuple[str, Hashable], threading.Lock] = {}
_shared: OrderedDict[str, dict[Hashable, Any]] = OrderedDict()


def shared_part(fingerprint: str, key: Hashable, build: Callable[[], _Part]) -> tuple[_Part, bool]:
    """The part under ``key`` of the vocabulary ``fingerprint``, built with ``build`` when no
    tokenizer of that vocabulary built it yet; also whether this call built it."""
    with _shared_lock:
        parts = _shared.get(fingerprint)
        if parts is not None:
            _shared.move_to_end(fingerprint)
            if key in parts:
                return parts[key], False
        lock = _shared_builds.setdefault((fingerprint, key), threading.Lock())
    with lock:
        with _shared_lock:
            parts = _shared.get(fingerprint)
            if parts is not None and key in parts:
                return parts[key], False
        made = build()
        with _shared_lock:
            _shared.setdefault(fingerprint, {})[key] = made
            _shared.move_to_end(fingerprint)
            while len(_shared) > SHARED_VOCABULARIES:
                gone, _ = _shared.popitem(last=False)
                for pair in [p for p in _shared_builds if p[0] == gone]:
                    del _shared_builds[pair]
        return made, True


class DerivedParts:
    """The structures derived from one tokenizer, by key; each built once, thread-safe.

    ``fingerprint``, when given, names the vocabulary: parts asked for with ``shared=True`` are
    then shared with every tokenizer of the same fingerprint (:func:`shared_part`)."""

    def __init__(self, fingerprint: Callable[[], str | None] | None = None) -> None:
        self._fingerprint = fingerprint
        self._lock = threading.Lock()
        self._part_locks: dict[Hashable, threading.Lock] = {}
        self._parts: dict[Hashable, Any] = {}
        self.builds: Counter[str] = Counter()

    def part(self, key: Hashable, name: str, build: Callable[[], _Part], *, shared: bool = False) -> _Part:
        """The part stored under ``key``, built with ``build`` on first use (``name`` counts
        the build in :attr:`builds`).  ``shared``: a function of the vocabulary alone, taken
        from another tokenizer of the same vocabulary when one built it."""
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
                fingerprint = self._fingerprint() if shared and self._fingerprint else None
                if fingerprint is None:
                    hit, built = build(), True
                else:
                    hit, built = shared_part(fingerprint, key, build)
                self._parts[key] = hit
                if built:
                    self.builds[name] += 1
            return hit

    def peek(self, key: Hashable) -> Any | None:
        """The part under ``key`` if built, else None (builds nothing)."""
        return self._parts.get(key)
