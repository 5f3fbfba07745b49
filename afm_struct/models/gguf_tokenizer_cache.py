"""A GGUF's tokenizer through the disk cache (:mod:`afm_struct.models.disk_cache`).

Rebuilding a tokenizer from a GGUF means parsing its header in Python (~0.6 s for SmolLM2's
49k tokens and merges) and then the merges table (~0.3 s).  The cache keeps the result as the
Rust tokenizer's own JSON plus the :class:`~afm_struct.models.gguf_tokenizer.TokenizerMeta`,
keyed by the file (:func:`~afm_struct.models.disk_cache.file_digest`): a second start reads it
back without opening the header.  The tokenizer read back is the one built (its serialized
form, hence :meth:`Tokenizer.vocabulary_fingerprint`, is identical).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import disk_cache, gguf_tokenizer
from .gguf_tokenizer import TokenizerMeta, build_tokenizer, tokenizer_meta
from .tokenizer import Tokenizer, from_rust_tokenizer

KIND = "gguf-tokenizer"


def _encode(parts: tuple[Any, TokenizerMeta]) -> dict[str, Any]:
    raw, meta = parts
    return {"tokenizer": raw.to_str(), "ids": meta.ids, "template": meta.template, "add_bos": meta.add_bos}


def _decode(stored: dict[str, Any]) -> tuple[Any, TokenizerMeta]:
    from tokenizers import Tokenizer as RustTokenizer

    ids = {name: (None if value is None else int(value)) for name, value in stored["ids"].items()}
    for name in ("bos", "eos", "pad", "unk", "eot"):
        ids.setdefault(name, None)
    template = stored["template"]
    if template is not None and not isinstance(template, str):
        raise TypeError("template is not a string")
    # tokenizers raises its own Exception subclass on a malformed JSON: a ValueError here.
    try:
        raw = RustTokenizer.from_str(stored["tokenizer"])
    except Exception as exc:
        raise ValueError(f"unreadable tokenizer: {exc}") from exc
    return raw, TokenizerMeta(ids, template, bool(stored["add_bos"]))


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
        raw, meta = build()
    else:
        raw, meta = disk_cache.load_or_build(KIND, key, build, encode=_encode, decode=_decode)
    return from_rust_tokenizer(raw, meta)
