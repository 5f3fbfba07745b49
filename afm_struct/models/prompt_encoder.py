"""Token ids of a rendered chat prompt in which request text never becomes a special token.

The prompt is first encoded as it always was (special strings matched), with offsets.  A special
token whose characters overlap a user span, or that straddles a cut point, came from the request:
the stretch of text between the two legitimate special tokens around it is encoded again with
special-token matching off (Hugging Face's ``split_special_tokens``), and every other token is kept
as it was.  Text between special tokens is encoded independently by the tokenizer anyway
(normalizer and pre-tokenizer run per stretch), so the result is exactly the tokenization of the
prompt with the forged tokens read as text, and a prompt that forges nothing keeps its old ids.
"""

from __future__ import annotations

import bisect
import threading
from typing import Any

from ..errors import InvalidRequestError
from .user_text import Located, SpecialTokens

# Texts at least this long are encoded with the GIL released (see encode_released).
RELEASE_GIL_CHARS = 2048


def encode_released(backend: Any, text: str) -> Any:
    """``backend.encode(text)`` (no special tokens added), without holding the GIL for long
    texts.

    ``tokenizers``' ``encode`` holds the GIL for the whole byte-pair merge, which is superlinear
    in a word's length: a 600,000-character word held it ~1.1 s and 200,000 CJK characters
    ~2.5 s, pausing every running stream (the generator thread needs the GIL each step).
    ``encode_batch`` runs the same tokenization with the GIL released: measured, the longest
    pause of a 1 ms ticker thread fell to 25 ms and 93 ms (benchmarks/hostile/huge_prompt.md).
    Short texts keep ``encode`` (no hand-off to the tokenizer's thread pool)."""
    if len(text) < RELEASE_GIL_CHARS:
        return backend.encode(text, add_special_tokens=False)
    return backend.encode_batch([text], add_special_tokens=False)[0]


class PromptEncoder:
    """Encodes prompts for one ``tokenizers.Tokenizer``."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.specials = SpecialTokens.of(backend.get_added_tokens_decoder())
        self._plain: Any = None
        self._lock = threading.Lock()

    def _plain_backend(self) -> Any:
        # A copy: the flag is tokenizer state, and the shared tokenizer is used from many threads.
        with self._lock:
            if self._plain is None:
                from tokenizers import Tokenizer as RustTokenizer

                plain = RustTokenizer.from_str(self.backend.to_str())
                plain.encode_special_tokens = True
                self._plain = plain
            return self._plain

    def encode(self, text: str, located: Located | None = None) -> list[int]:
        """Ids of ``text``; special tokens touching ``located``'s spans or cuts are read as text."""
        if self.backend.encode_special_tokens:
            # Hugging Face's ``encode(..., split_special_tokens=True)`` leaves this flag set on
            # the shared tokenizer until its next plain call: the template's own control tokens
            # would then be read as text (found by a test that shared one tokenizer).
            self.backend.encode_special_tokens = False
        enc = encode_released(self.backend, text)
        ids: list[int] = enc.ids
        if located is None or not (located.spans or located.cuts):
            return ids
        special, offsets = self.specials.ids, enc.offsets
        specials = [j for j, t in enumerate(ids) if t in special]
        forged = [j for j in specials if located.touches(*offsets[j])]
        if not forged:
            return ids
        out: list[int] = []
        start_char = start_tok = 0
        for j in [*sorted(set(specials) - set(forged)), len(ids)]:
            end_char = offsets[j][0] if j < len(ids) else len(text)
            k = bisect.bisect_left(forged, start_tok)
            if k < len(forged) and forged[k] < j:
                out += self._as_text(text[start_char:end_char])
            else:
                out += ids[start_tok:j]
            if j < len(ids):
                out.append(ids[j])
                start_char, start_tok = offsets[j][1], j + 1
        return out

    def _as_text(self, text: str) -> list[int]:
        ids: list[int] = encode_released(self._plain_backend(), text).ids
        if any(t in self.specials.ids for t in ids):
            # The vocabulary's own merges spell a special token from plain text: there is no
            # plain-text reading of it to give.
            raise InvalidRequestError(
                "the messages contain text that this model's tokenizer can only read as a special "
                "(control) token; remove the control-token text from the messages", param="messages")
        return ids
