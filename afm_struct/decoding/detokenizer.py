"""Streaming detokenization that never splits a UTF-8 character."""

from __future__ import annotations

from typing import Protocol


class _Decoder(Protocol):
    def decode(self, ids: list[int]) -> str: ...


class StreamingDetokenizer:
    """Turn tokens into text deltas.

    Byte-level BPE tokens can end inside a multi-byte character; the decoder then yields
    U+FFFD.  Pending tokens are held until they decode cleanly, and only the pending segment
    is re-decoded, so the cost per token stays constant.  Tokens in ``hidden`` (special tokens:
    see :mod:`.hidden_tokens`) have no text.
    """

    def __init__(self, tokenizer: _Decoder, hidden: frozenset[int] = frozenset()) -> None:
        self._tokenizer = tokenizer
        self._pending: list[int] = []
        self._hidden = hidden

    def add(self, token: int) -> str:
        """Feed one token; return the text that is now complete (maybe empty)."""
        if token in self._hidden:
            return ""
        self._pending.append(token)
        text = self._tokenizer.decode(self._pending)
        if text.endswith("\ufffd") and len(self._pending) < 8:
            return ""
        self._pending.clear()
        return text

    def hidden_text(self, token: int) -> str:
        """The text of a hidden token, never shown (what it means is read: an end of turn)."""
        return self._tokenizer.decode([token])

    def flush(self) -> str:
        """The text of what is pending at the end of generation, up to its last whole
        character.  Pending tokens are held only while they end inside a character, so at the
        end they are a character the budget (or the end) cut: the tokens that complete no
        character are dropped rather than shown as U+FFFD, on every protocol, streamed or not."""
        pending, self._pending = self._pending, []
        for keep in range(len(pending), 0, -1):
            text = self._tokenizer.decode(pending[:keep])
            if not text.endswith("\ufffd"):
                return text
        return ""
