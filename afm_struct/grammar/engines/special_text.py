"""Special-token text inside a constraint is written as plain text tokens.

A constraint may require text that spells a special token (``guided_choice: ["<|im_end|>x"]``, a
schema ``const: "<|im_end|>"``).  llguidance keeps special tokens out of the byte alphabet, so
its parser accepts that text only as plain tokens (``<``, ``|``, ``im`` ...), but when the text is
forced it tokenizes the forced bytes with the Hugging Face tokenizer, which matches special
tokens in text: the forced run and the one-token mask then name the special token, which the
parser itself rejects (and which may be EOS, which the EOS policy then removes, leaving no token
at all).  That was a 500 "the grammar rejected a token it allowed".

The project's rule is that request text never becomes a special token (docs/architecture.md),
so the right answer is the text, written with plain tokens: a special token a forced run or a
mask names is kept only if the parser takes it (a tool format's markup, referred to by id);
otherwise it is replaced by the first token of its text's plain spelling (special-token matching
off), which the parser takes.  :class:`SpecialSpelling` holds, per tokenizer, which ids are
special and their plain first tokens.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import llguidance

    from ...models.tokenizer import Tokenizer


class SpecialSpelling:
    """The special ids of one tokenizer (as llguidance counts them) and their plain spellings."""

    def __init__(self, tokenizer: Tokenizer, ll_tokenizer: llguidance.LLTokenizer) -> None:
        self._tokenizer = tokenizer
        hf = getattr(tokenizer, "hf", None)
        decoder = getattr(hf, "added_tokens_decoder", None) or {}
        size = int(tokenizer.vocab_size)
        ids = [int(i) for i in decoder if int(i) < size and ll_tokenizer.is_special_token(int(i))]
        self.ids = frozenset(ids)
        self.table = np.zeros(size, dtype=bool)  # table[t]: t is special (a cheap test of a mask's list)
        self.table[ids] = True
        self._texts = {int(i): str(getattr(decoder[i], "content", "")) for i in decoder if int(i) in self.ids}
        self._plain: dict[int, int | None] = {}
        self._backend: Any = None
        self._lock = threading.Lock()
        self._by_text: dict[str, int] | None = None  # text -> id, built on first use

    def prefix_of(self, text: str) -> tuple[int, str] | None:
        """The special token ``text`` starts with, as (id, its text), the longest; else None (a
        structural tag writes such markup as the token itself: structural_tag_lark.py)."""
        with self._lock:
            if self._by_text is None:
                self._by_text = {t: i for i, t in sorted(self._texts.items(), reverse=True) if t}
            by_text = self._by_text
        found = [(i, t) for t, i in by_text.items() if text.startswith(t)]
        return max(found, key=lambda f: len(f[1])) if found else None

    def any_in(self, tokens: Sequence[int] | np.ndarray) -> bool:
        """True when any of ``tokens`` is special."""
        if not self.ids or len(tokens) == 0:
            return False
        arr = np.asarray(tokens, dtype=np.int64)
        arr = arr[(arr >= 0) & (arr < self.table.shape[0])]
        return bool(self.table[arr].any())

    def among(self, tokens: Sequence[int] | np.ndarray) -> list[int]:
        """The special ids among ``tokens``."""
        arr = np.asarray(tokens, dtype=np.int64)
        arr = arr[(arr >= 0) & (arr < self.table.shape[0])]
        return [int(t) for t in arr[self.table[arr]]]

    def plain_first(self, token: int) -> int | None:
        """The first token of special ``token``'s text read as plain text (None if that
        reading is itself special or empty)."""
        with self._lock:
            if token in self._plain:
                return self._plain[token]
            text = self._texts.get(token, "")
            first: int | None = None
            if text:
                ids = self._plain_backend().encode(text, add_special_tokens=False).ids
                if ids and ids[0] not in self.ids and ids[0] < self.table.shape[0]:
                    first = int(ids[0])
            self._plain[token] = first
            return first

    def _plain_backend(self) -> Any:
        # A copy with special-token matching off (the shared tokenizer is used from many threads).
        if self._backend is None:
            from tokenizers import Tokenizer as RustTokenizer

            backend = getattr(getattr(self._tokenizer, "hf", None), "backend_tokenizer", None)
            if backend is None:
                raise RuntimeError("the tokenizer has no fast backend")
            plain = RustTokenizer.from_str(backend.to_str())
            plain.encode_special_tokens = True
            self._backend = plain
        return self._backend
