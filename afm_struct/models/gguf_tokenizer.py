"""Rebuild a model's tokenizer from GGUF metadata with the ``tokenizers`` library.

Two vocabulary kinds (``tokenizer.ggml.model``):

* ``gpt2``: byte-level BPE.  GGUF keeps the vocabulary, the merges, token types and a
  pre-tokenizer *name* (``tokenizer.ggml.pre``); the regexes behind each name live in llama.cpp.
  The table below carries the ones for the families we load; an unknown name is an error, not a
  guess, because a wrong pre-tokenizer silently changes every token id.  Two more things
  the original tokenizer.json carries and GGUF does not are keyed on the same name: Llama 3's
  ``ignore_merges`` (a pre-token that is itself in the vocabulary is that token, merges or not;
  llama.cpp sets it for these names too) and Qwen2/3's NFC normalizer (llama.cpp omits it; the
  model was trained on NFC text, and the real tokenizer composes e.g. ``e`` + U+0301 into ``é``
  before splitting).
* ``llama``: SentencePiece BPE (Llama 2, Mistral v0.1-v0.3, Phi-3, Gemma).  GGUF keeps pieces
  and scores but no merges; llama.cpp merges the adjacent pair whose result scores highest, which
  is a BPE whose merge ranks are ordered by the merged piece's score (as transformers' GGUF
  converter built it).  Bytes without a piece fall back to the ``<0xNN>`` tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

from ..errors import ModelLoadError
from .gguf import GGUFContents

_LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Mistral NeMo / Small 3 ("tekken") and Phi-4-mini ("gpt-4o"): case-split words, no contractions.
_TEKKEN = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_CONTRACTION = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
_GPT4O = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+" + _CONTRACTION
    + r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*" + _CONTRACTION
    + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# SentencePiece's word boundary marker (U+2581), written for spaces.
SPIECE = "\u2581"


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
    # GLM-4 / GLM-4.5 ("glm4", "chatglm-bpe"): llama.cpp splits them with Llama 3's regex.
    if name in ("llama-bpe", "llama3", "smaug-bpe", "dbrx", "glm4", "chatglm-bpe"):
        return pre_tokenizers.Sequence([_split(_LLAMA3), _byte_level()])
    if name in ("qwen2", "deepseek-r1-qwen"):
        return pre_tokenizers.Sequence([_split(_QWEN2), _byte_level()])
    if name == "tekken":
        return pre_tokenizers.Sequence([_split(_TEKKEN), _byte_level()])
    if name == "gpt-4o":
        return pre_tokenizers.Sequence([_split(_GPT4O), _byte_level()])
    raise ModelLoadError(
        f"unsupported GGUF pre-tokenizer {name!r}; use an mlx-lm model directory for this model")


# llama.cpp's LLAMA3 pre-tokenizer names, the ones it sets ignore_merges for.
_IGNORE_MERGES = frozenset({"llama-bpe", "llama3", "llama-v3", "falcon3"})
# Vocabularies whose tokenizer.json normalizes to NFC before pre-tokenizing (Qwen2, 2.5, 3 and
# the DeepSeek-R1 distills of Qwen).
_NFC = frozenset({"qwen2", "deepseek-r1-qwen"})


def _list(contents: GGUFContents, key: str) -> list[Any]:
    value = contents.metadata.get(key)
    if value is None:
        raise ModelLoadError(f"GGUF metadata lacks {key} in {contents.path}")
    return value.tolist() if hasattr(value, "tolist") else list(value)


def _byte_bpe(contents: GGUFContents, tokens: list[str]) -> Tokenizer:
    merges = [tuple(m.split(" ", 1)) for m in _list(contents, "tokenizer.ggml.merges")]
    vocab = {tok: i for i, tok in enumerate(tokens)}
    pre = str(contents.meta("tokenizer.ggml.pre") or "default")
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False,
                                     ignore_merges=pre in _IGNORE_MERGES))
    if pre in _NFC:
        tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = _pre_tokenizer(pre)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def spm_merges(tokens: list[str], scores: list[float], types: list[int]) -> list[tuple[str, str]]:
    """Merge ranks for a SentencePiece vocabulary: every split of a normal piece into two pieces,
    the best-scoring results first (llama.cpp's SPM merges by the merged piece's score)."""
    index = {tok: i for i, tok in enumerate(tokens)}
    found: list[tuple[float, int, int, str, str]] = []
    for tok, score, kind in zip(tokens, scores, types, strict=True):
        if kind not in (1, 4):  # control, byte and unused pieces are never merge results
            continue
        local = [(score, index[tok[:k]], index[tok[k:]], tok[:k], tok[k:]) for k in range(1, len(tok))
                 if tok[:k] in index and tok[k:] in index]
        found.extend(sorted(local, key=lambda m: (m[1], m[2]), reverse=True))
    found.sort(key=lambda m: m[0], reverse=True)  # stable: ties keep the order above
    return [(left, right) for _, _, _, left, right in found]


def _sentencepiece(contents: GGUFContents, tokens: list[str], types: list[int]) -> Tokenizer:
    scores = [float(s) for s in _list(contents, "tokenizer.ggml.scores")]
    unk = contents.meta("tokenizer.ggml.unknown_token_id")
    vocab = {tok: i for i, tok in enumerate(tokens)}
    tokenizer = Tokenizer(models.BPE(
        vocab=vocab, merges=spm_merges(tokens, scores, types), fuse_unk=True, byte_fallback=True,
        unk_token=tokens[int(unk)] if unk is not None else None))
    # llama.cpp writes a space before the text and after every special token (Llama, Mistral,
    # Phi-3); Gemma's vocabulary says not to.  The normalizer runs on each text segment between
    # added tokens, which is the same thing.
    steps = [normalizers.Replace(" ", SPIECE)]
    if bool(contents.meta("tokenizer.ggml.add_space_prefix", True)):
        steps.insert(0, normalizers.Prepend(SPIECE))
    tokenizer.normalizer = normalizers.Sequence(steps)
    # No leading-space strip on decode: the engine decodes token by token, and a strip would eat
    # the space of every word-initial piece (llama.cpp streams them with the space too).
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace(SPIECE, " "), decoders.ByteFallback(), decoders.Fuse()])
    return tokenizer


def build_tokenizer(contents: GGUFContents) -> Tokenizer:
    """A ``tokenizers.Tokenizer`` equivalent to the one the GGUF was converted from."""
    kind = contents.meta("tokenizer.ggml.model")
    tokens = _list(contents, "tokenizer.ggml.tokens")
    types = contents.metadata.get("tokenizer.ggml.token_type")
    types = [int(t) for t in types.tolist()] if types is not None else [1] * len(tokens)
    if kind == "gpt2":
        tokenizer = _byte_bpe(contents, tokens)
    elif kind == "llama":
        tokenizer = _sentencepiece(contents, tokens, types)
    else:
        raise ModelLoadError(f"unsupported GGUF tokenizer model {kind!r} (supported: 'gpt2' byte-level "
                             "BPE and 'llama' SentencePiece); use an mlx-lm model directory")
    # Types 3 (control) and 4 (user-defined) are matched whole, before BPE, like llama.cpp does.
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


@dataclass(frozen=True)
class TokenizerMeta:
    """What the facade needs from a GGUF besides the Rust tokenizer: the special ids as stored
    (:func:`special_ids`), the chat template and whether prompts start with BOS."""

    ids: dict[str, int | None]
    template: str | None
    add_bos: bool


def tokenizer_meta(contents: GGUFContents) -> TokenizerMeta:
    """The :class:`TokenizerMeta` of a GGUF's metadata."""
    template = contents.meta("tokenizer.chat_template")
    add_bos = bool(contents.meta("tokenizer.ggml.add_bos_token", False))
    if contents.meta("tokenizer.ggml.pre") in ("glm4", "chatglm-bpe"):
        add_bos = False  # llama.cpp drops GLM-4's BOS: its template writes [gMASK]<sop> itself
    return TokenizerMeta(special_ids(contents), str(template) if template else None, add_bos)
