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
        """Whatever is pending, replacement characters included (end of generation)."""
        text = self._tokenizer.decode(self._pending) if self._pending else ""
        self._pending.clear()
        return text
