"""A GGUF's tokenizer through the disk cache (:mod:`afm_struct.models.disk_cache`).

Rebuilding a tokenizer from a GGUF means parsing its header in Python (~0.6 s for SmolLM2's
49k tokens and merges) and then the merges table (~0.3 s).  The cache keeps the result as the
Rust tokenizer's own JSON (a side file, which transformers parses once with ``from_file``;
handed a tokenizer object instead, it would serialize and parse it again: ~0.3 s) and an entry
with the :class:`~afm_struct.models.gguf_tokenizer.TokenizerMeta`, the special tokens' strings
and the vocabulary size, keyed by the file (:func:`~afm_struct.models.disk_cache.file_digest`)
and this code.  A second start reads it back without opening the header.  The tokenizer read
back is the one built (its serialized form, hence :meth:`Tokenizer.vocabulary_fingerprint`, is
identical).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import disk_cache, gguf_tokenizer
from .gguf_tokenizer import TokenizerMeta, build_tokenizer, tokenizer_meta
from .tokenizer import Tokenizer, from_rust_tokenizer, gguf_facade

KIND = "gguf-tokenizer"
_SPECIALS = ("bos", "eos", "pad", "unk", "eot")


@dataclass(frozen=True)
class _Stored:
    """A cache hit: the tokenizer's JSON file and what the facade needs beside it."""

    file: Path
    meta: TokenizerMeta
    names: dict[str, str | None]
    vocab_size: int


def _optional(value: Any, kind: type) -> Any:
    if value is not None and not isinstance(value, kind):
        raise TypeError(f"{value!r} is not a {kind.__name__}")
    return value


def load_gguf_tokenizer(path: Path | str, contents: Callable[[], Any]) -> Tokenizer:
    """The tokenizer of the GGUF at ``path``: from the cache when this file's is there, else
    built from ``contents()`` (the file read by :func:`~afm_struct.models.gguf.read_gguf`,
    called only on a miss) and stored."""
    def build() -> tuple[Any, TokenizerMeta]:
        read = contents()
        return build_tokenizer(read), tokenizer_meta(read)

    try:
        key = f"{disk_cache.file_digest(Path(path))}:{disk_cache.code_digest(gguf_tokenizer)}"
    except OSError:  # missing or unreadable: read_gguf says so in its own words
        return from_rust_tokenizer(*build())

    def encode(parts: tuple[Any, TokenizerMeta]) -> dict[str, Any]:
        raw, meta = parts
        return {"tokenizer_sha256": disk_cache.write_file(KIND, key, raw.to_str().encode()),
                "ids": meta.ids, "template": meta.template, "add_bos": meta.add_bos,
                "names": {k: (raw.id_to_token(i) if i is not None else None) for k, i in meta.ids.items()},
                "vocab_size": raw.get_vocab_size(with_added_tokens=True)}

    def decode(stored: dict[str, Any]) -> _Stored:
        ids = {k: _optional(stored["ids"].get(k), int) for k in _SPECIALS}
        names = {k: _optional(stored["names"].get(k), str) for k in _SPECIALS}
        meta = TokenizerMeta(ids, _optional(stored["template"], str), bool(stored["add_bos"]))
        file = disk_cache.checked_file(KIND, key, stored["tokenizer_sha256"])
        return _Stored(file, meta, names, int(stored["vocab_size"]))

    got = disk_cache.load_or_build(KIND, key, build, encode=encode, decode=decode)
    if isinstance(got, _Stored):
        return gguf_facade(got.meta, got.names, got.vocab_size, tokenizer_file=str(got.file))
    return from_rust_tokenizer(*got)
