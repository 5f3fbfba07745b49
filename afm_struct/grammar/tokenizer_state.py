"""Everything derived from one tokenizer, with one owner: built at most once per model, shared.

A model's tokenizer feeds several structures that are costly to build and never change: the
llguidance tokenizer (its token trie; ~1 s for 49k tokens, ~10 s for 128k), the closing
search's candidate vocabulary (~0.3 s), the logprobs token table, and the compilers (one per
set of compile options, each holding its grammar cache).  They used to live in three
module-level caches keyed by ``id(tokenizer)``, which kept every tokenizer ever used alive
(an id can be reused once its object is freed, so each entry pinned its tokenizer to be safe),
and in an attribute patched onto the tokenizer; concurrent first uses of the closing vocabulary
each built their own.

Now the :class:`~afm_struct.models.tokenizer.Tokenizer` facade owns one
:class:`TokenizerState` (``tokenizer.derived``, made with it at load), and every part is built
on first use under that state's lock, exactly once, and freed with the tokenizer.  Code that
needs a part takes the facade (typed ``Tokenizer``) and asks ``tokenizer.derived``: there is no
lookup by identity and no other cache of these parts.  ``builds`` counts the constructions of
each part: what the tests check and ``benchmarks/masks/tokenizer_state.py`` reports.
"""

from __future__ import annotations

import threading
import weakref
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import llguidance

    from ..decoding.logprobs import TokenTable
    from ..models.tokenizer import Tokenizer
    from .closing_vocab import ClosingVocab
    from .compiler import ConstraintCompiler
    from .spec import CompileOptions

_Part = TypeVar("_Part")


class TokenizerState:
    """The structures derived from one tokenizer; each built once, on first use, thread-safe."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        # Weak: the tokenizer owns this state, not the other way round (no cycle to keep alive).
        self._tokenizer = weakref.ref(tokenizer)
        self._lock = threading.Lock()
        self._part_locks: dict[Any, threading.Lock] = {}
        self._parts: dict[Any, Any] = {}
        self.builds: Counter[str] = Counter()

    @property
    def tokenizer(self) -> Tokenizer:
        """The tokenizer this state derives from (alive as long as anything uses the state)."""
        tokenizer = self._tokenizer()
        if tokenizer is None:
            raise RuntimeError("the tokenizer of this state was freed")
        return tokenizer

    def _part(self, key: Any, name: str, build: Callable[[], _Part]) -> _Part:
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

    @property
    def ll_tokenizer(self) -> llguidance.LLTokenizer:
        """llguidance's view of the tokenizer (its token trie)."""
        def build() -> llguidance.LLTokenizer:
            import llguidance.hf

            tokenizer = self.tokenizer
            return llguidance.hf.from_tokenizer(tokenizer.hf, n_vocab=int(tokenizer.vocab_size))
        return self._part("ll_tokenizer", "ll_tokenizer", build)

    @property
    def closing_vocab(self) -> ClosingVocab:
        """The closing search's candidate vocabulary (:mod:`.closing_vocab`)."""
        from .closing_vocab import build_closing_vocab

        return self._part("closing_vocab", "closing_vocab", lambda: build_closing_vocab(self.tokenizer))

    @property
    def token_table(self) -> TokenTable:
        """Token id → display text and bytes, for logprobs (:mod:`afm_struct.decoding.logprobs`)."""
        from ..decoding.logprobs import TokenTable

        return self._part("token_table", "token_table", lambda: TokenTable(self.tokenizer))

    @property
    def longest_token_bytes(self) -> int:
        """The most bytes one (non-special) token spells: a text of n bytes needs at least
        n / this many tokens (the budget check's length floor, decoding/output_floor.py)."""
        def build() -> int:
            ll = self.ll_tokenizer
            return max((len(ll.decode_bytes([i])) for i in range(int(self.tokenizer.vocab_size))
                        if not ll.is_special_token(i)), default=1) or 1
        return self._part("longest_token_bytes", "longest_token_bytes", build)

    def hidden_tokens(self, keep: frozenset[str]) -> frozenset[int]:
        """The ids a response's text never shows, but those written ``keep``
        (:mod:`afm_struct.decoding.hidden_tokens`); one set per ``keep`` (the tool formats' and
        thinking tags' markers: a short, fixed list)."""
        from ..decoding.hidden_tokens import build_hidden_tokens

        return self._part(("hidden_tokens", keep), "hidden_tokens",
                          lambda: build_hidden_tokens(self.tokenizer, keep))

    def compiler(self, options: CompileOptions | None = None) -> ConstraintCompiler:
        """The shared :class:`~.compiler.ConstraintCompiler` (and so grammar cache) for ``options``."""
        from .compiler import ConstraintCompiler
        from .spec import CompileOptions

        options = options or CompileOptions()
        return self._part(("compiler", options), "compiler",
                          lambda: ConstraintCompiler(self.tokenizer, options))

    def build_all(self) -> None:
        """Build the parts every request may need now (at model load), not on a request: the
        llguidance tokenizer, the closing vocabulary, the token table and the hidden tokens of a
        request without tools or thinking (others are built on the first request needing them)."""
        _ = self.ll_tokenizer, self.closing_vocab, self.token_table, self.hidden_tokens(frozenset())

