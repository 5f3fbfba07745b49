"""The tokens whose text a response never shows: special tokens, and markup no parser reads.

A model can sample any token.  A control token (``<|im_start|>``, ``[INST]``, ``<|eot_id|>``) is
structure, never text: like vLLM, llama.cpp and Hugging Face's ``skip_special_tokens`` default,
its text is dropped when detokenizing.  The same goes for the tokens of tool-call markup and
thinking tags (``<tool_call>``, ``[TOOL_CALLS]``, ``<think>``) unless the request's parsers read
them: a request with tools keeps its tool format's markers (its call router consumes them), a
request whose thinking block is split keeps the thinking tags.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..tools.formats import load_table
from .reasoning_gate import THINK_TAGS

if TYPE_CHECKING:
    from ..models.tokenizer import Tokenizer


def markup_texts() -> frozenset[str]:
    """Every tool format's markers and every thinking tag."""
    tags = {tag for pair in THINK_TAGS for tag in pair}
    for fmt in load_table().formats:
        tags.update(fmt.markup)
    return frozenset(tags)


def build_hidden_tokens(tokenizer: Tokenizer, keep: frozenset[str]) -> frozenset[int]:
    """Compute :func:`hidden_token_ids` (use that: the tokenizer's state keeps each set)."""
    hf = tokenizer.hf
    special = {i for i, added in hf.added_tokens_decoder.items() if added.special}
    special.update(getattr(hf, "all_special_ids", None) or ())
    backend = getattr(hf, "backend_tokenizer", None)
    if backend is not None:
        # The Rust tokenizer answers each lookup; the whole vocabulary as a dict (get_vocab)
        # costs ~0.5 s at 200k tokens, for a few dozen texts and ids.
        markup = {i for t in markup_texts() if (i := backend.token_to_id(t)) is not None}
        hidden = special | markup
        texts = {i: t for i in hidden if (t := backend.id_to_token(i)) is not None}
    else:
        vocab = hf.get_vocab()
        markup = {vocab[t] for t in markup_texts() if t in vocab}
        hidden = special | markup
        texts = {i: t for t, i in vocab.items() if i in hidden}
    # A kept marker may span several tokens (Harmony's '<|channel|>commentary to=functions.'):
    # every special or markup token inside one is read by the parser, so it keeps its text.
    kept = {i for i, t in texts.items() if any(t in marker for marker in keep)}
    return frozenset(hidden - kept)


def hidden_token_ids(tokenizer: Tokenizer, *, keep: Iterable[str] = ()) -> frozenset[int]:
    """Ids of the tokens to drop from the text: special tokens and markup tokens, except the
    tokens written ``keep`` (the markers the request's parsers read); computed once per model
    and ``keep`` (the tokenizer's derived parts keep them, and free them with it)."""
    kept = frozenset(keep)
    return tokenizer.derived.part(("hidden_tokens", kept), "hidden_tokens",
                                  lambda: build_hidden_tokens(tokenizer, kept))
