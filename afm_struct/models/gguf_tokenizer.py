"""Rebuild a model's tokenizer from GGUF metadata with the ``tokenizers`` library.

GGUF keeps the vocabulary, the BPE merges, token types and a pre-tokenizer *name*
(``tokenizer.ggml.pre``); the regexes behind each name live in llama.cpp.  The table below
carries the ones for byte-level BPE families; an unknown name is an error, not a guess,
because a wrong pre-tokenizer silently changes every token id.
"""

from __future__ import annotations

from typing import Any

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

from ..errors import ModelLoadError
from .gguf import GGUFContents

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _split(pattern: str) -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False)


def _byte_level() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)


def _pre_tokenizer(name: str) -> pre_tokenizers.PreTokenizer:
    # Digits-first families: llama.cpp splits every digit before the GPT-2 regex.
    if name in ("smollm", "starcoder", "refact", "codeshell", "exaone", "minerva", "command-r"):
        return pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True),
             pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    if name in ("default", "gpt-2", "gpt2", "phi-2", "jina-es", "olmo", "stablelm2"):
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if name in ("llama-bpe", "llama3", "smaug-bpe", "dbrx"):
        return pre_tokenizers.Sequence([_split(_LLAMA3), _byte_level()])
    if name in ("qwen2", "deepseek-r1-qwen"):
        return pre_tokenizers.Sequence([_split(_QWEN2), _byte_level()])
    raise ModelLoadError(
        f"unsupported GGUF pre-tokenizer {name!r}; use an mlx-lm model directory for this model")


def _list(contents: GGUFContents, key: str) -> list[Any]:
    value = contents.metadata.get(key)
    if value is None:
        raise ModelLoadError(f"GGUF metadata lacks {key} in {contents.path}")
    return value.tolist() if hasattr(value, "tolist") else list(value)


def build_tokenizer(contents: GGUFContents) -> Tokenizer:
    """A ``tokenizers.Tokenizer`` equivalent to the one the GGUF was converted from."""
    kind = contents.meta("tokenizer.ggml.model")
    if kind != "gpt2":
        raise ModelLoadError(
            f"unsupported GGUF tokenizer model {kind!r} (only byte-level BPE, 'gpt2', is supported)")
    tokens = _list(contents, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in _list(contents, "tokenizer.ggml.merges")]
    types = contents.metadata.get("tokenizer.ggml.token_type")
    types = types.tolist() if types is not None else [1] * len(tokens)
    vocab = {tok: i for i, tok in enumerate(tokens)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tokenizer.pre_tokenizer = _pre_tokenizer(str(contents.meta("tokenizer.ggml.pre") or "default"))
    tokenizer.decoder = decoders.ByteLevel()
    # Types 3 (control) and 4 (user-defined) are matched whole, before BPE, like llama.cpp does.
    from tokenizers import AddedToken

    specials = [AddedToken(tokens[i], special=(t == 3), normalized=False)
                for i, t in enumerate(types) if t in (3, 4)]
    if specials:
        tokenizer.add_tokens(specials)
    return tokenizer


def special_ids(contents: GGUFContents) -> dict[str, int | None]:
    """BOS, EOS, padding and unknown ids as stored in the metadata."""
    def get(key: str) -> int | None:
        value = contents.meta(f"tokenizer.ggml.{key}")
        return int(value) if value is not None else None

    return {"bos": get("bos_token_id"), "eos": get("eos_token_id"),
            "pad": get("padding_token_id"), "unk": get("unknown_token_id"),
            "eot": get("eot_token_id")}
