"""A lower bound on how many tokens a text becomes, from its length alone.

A prompt far over the context is refused before it is tokenized: encoding 5 MB of text took
seconds and ~700 MB for the encoding's offsets, strings and ids.  The bound is sound, so it never
refuses a prompt that fits: every token stands for at most ``chars_per_token`` characters of
the text the model reads (its longest piece: byte-level pieces hold one character per byte,
SentencePiece pieces one per character, byte-fallback pieces one byte), so ``n`` characters
take at least ``n / chars_per_token`` tokens.

That holds only while the tokenizer keeps every character.  Normalizers that compose characters
(NFC, NFKC) fold at most :data:`COMPOSE_MAX` characters into one; pre-tokenizers and added
tokens that drop whitespace leave the other characters, which are then the ones counted.  A
tokenizer that can turn unbounded text into one token (fused unknowns, WordPiece's whole-word
``[UNK]``, regex replacements) has no bound: :func:`token_bound` returns None and prompts are
checked after tokenizing only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..errors import ContextOverflowError

# The longest canonical decomposition (U+1F82 and its kin: 4 code points), so NFC and NFKC
# compose at most this many characters into one (tests check it against unicodedata).
COMPOSE_MAX = 4

# The characters str.isspace() accepts: a superset of the whitespace the tokenizers library
# strips (Rust's char::is_whitespace lacks U+001C..U+001F), so no character counted can vanish.
_SPACES = ("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
           "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")


@dataclass(frozen=True)
class TokenBound:
    """``fewest_tokens(text)`` never exceeds the number of tokens ``text`` encodes to."""

    chars_per_token: int  # the longest piece of the vocabulary, added tokens included
    compose: int = 1  # characters the normalizer may fold into one
    spaces_count: bool = True  # False: whitespace may vanish, only the other characters count

    def fewest_tokens(self, text: str) -> int:
        """A lower bound on ``len(encode(text))``."""
        n = len(text)
        if not self.spaces_count:
            n -= sum(text.count(c) for c in _SPACES)
        per_token = self.chars_per_token * self.compose
        return -(-n // per_token)


def check_fits(text: str, bound: TokenBound | None, context_length: int) -> None:
    """Raise :class:`ContextOverflowError` when ``text`` is certainly too long for a prompt of
    ``context_length`` tokens (which must leave one for the answer); no bound: no check."""
    if bound is None:
        return
    fewest = bound.fewest_tokens(text)
    if fewest >= context_length:
        raise ContextOverflowError(
            f"This model's maximum context length is {context_length} tokens. However, your "
            f"messages are {len(text)} characters long, so at least {fewest} tokens (this model's "
            f"tokens hold at most {bound.chars_per_token * bound.compose} characters). Please "
            "reduce the length of the messages.", param="messages")


def token_bound(hf: Any) -> TokenBound | None:
    """The bound for a Hugging Face fast tokenizer, or None when it has none (see the module
    docstring)."""
    backend = hf.backend_tokenizer
    normalizer, pre = _state(backend.normalizer), _state(backend.pre_tokenizer)
    norm, kept = _normalizer(normalizer), _pre_tokenizer(pre)
    if norm is None or kept is None or not _model_keeps_text(backend, normalizer, pre):
        return None
    vocab = backend.get_vocab(with_added_tokens=True)
    if not vocab:
        return None
    compose, norm_spaces = norm
    strips = any(t.lstrip or t.rstrip for t in backend.get_added_tokens_decoder().values())
    return TokenBound(chars_per_token=max(map(len, vocab)), compose=compose,
                      spaces_count=norm_spaces and kept and not strips)


def _state(component: Any) -> dict[str, Any] | None:
    """A tokenizers component's configuration, as tokenizer.json writes it."""
    return json.loads(component.__getstate__()) if component is not None else None


def _model_keeps_text(backend: Any, normalizer: dict[str, Any] | None,
                      pre: dict[str, Any] | None) -> bool:
    """True when every character reaches some token, none fused with unboundedly many others."""
    model: Any = backend.model
    kind = type(model).__name__
    if kind == "Unigram":  # its flags are not attributes; its state holds its vocabulary
        state = _state(model) or {}
        flags = {"byte_fallback": state.get("byte_fallback")}
    else:
        flags = {name: getattr(model, name, None) for name in ("byte_fallback", "unk_token", "fuse_unk")}
    byte_fallback = bool(flags["byte_fallback"]) and all(
        backend.token_to_id(f"<0x{b:02X}>") is not None for b in range(256))
    if kind == "BPE":
        if byte_fallback or _has_type(pre, "ByteLevel") or _has_type(normalizer, "ByteLevel"):
            return True  # every byte has a piece
        # Otherwise an unknown character is one unk (fused runs: one unk for any length), or
        # dropped when there is no unk token.
        return flags["unk_token"] is not None and not flags["fuse_unk"]
    if kind == "Unigram":
        return byte_fallback  # unknown runs are fused into one unk
    return False  # WordPiece (a long word is one [UNK]), WordLevel, unknown models


def _has_type(component: dict[str, Any] | None, kind: str) -> bool:
    if not component:
        return False
    if component.get("type") == kind:
        return True
    children = component.get("normalizers") or component.get("pretokenizers") or ()
    return any(_has_type(c, kind) for c in children)


def _normalizer(n: dict[str, Any] | None) -> tuple[int, bool] | None:
    """(characters folded into one at most, whether whitespace is kept), or None: unbounded."""
    if not n:
        return 1, True
    kind = n.get("type")
    if kind == "Sequence":
        compose, spaces = 1, True
        for child in n.get("normalizers") or ():
            got = _normalizer(child)
            if got is None:
                return None
            compose, spaces = compose * got[0], spaces and got[1]
        return compose, spaces
    if kind in ("NFC", "NFKC"):
        return COMPOSE_MAX, True
    if kind in ("NFD", "NFKD", "Lowercase", "Prepend", "ByteLevel"):
        return 1, True  # characters only expand
    if kind == "Strip":
        return 1, False
    if kind == "Replace":
        pattern = (n.get("pattern") or {}).get("String")
        content = n.get("content") or ""
        if pattern and content and len(content) >= len(pattern):
            return 1, True
    return None  # StripAccents, BertNormalizer, Precompiled, regex or shrinking replacements


def _pre_tokenizer(p: dict[str, Any] | None) -> bool | None:
    """Whether whitespace is kept (True) or may be dropped (False); None: other characters may
    be dropped too."""
    if not p:
        return True
    kind = p.get("type")
    if kind == "Sequence":
        kept = True
        for child in p.get("pretokenizers") or ():
            got = _pre_tokenizer(child)
            if got is None:
                return None
            kept = kept and got
        return kept
    if kind in ("ByteLevel", "Metaspace", "Digits", "UnicodeScripts"):
        return True
    if kind in ("Split", "Punctuation"):
        return None if str(p.get("behavior", "")).lower() == "removed" else True
    if kind in ("Whitespace", "WhitespaceSplit", "BertPreTokenizer"):
        return False
    return None  # CharDelimiterSplit drops its delimiter, whatever it is; unknown kinds
