"""The length-only lower bound on token counts (afm_struct.models.token_bound).

Soundness is what matters (a prompt that fits must never be refused): a hypothesis property
checks ``fewest_tokens(text) <= len(encode(text))`` on the embedded tokenizer, on every GGUF
family's tokenizer and on tokenizers built to exercise each rule (composing normalizers,
dropped whitespace, stripping added tokens), with texts made of the longest pieces, long runs
of one character, combining marks, Hangul jamo and special-token strings.
"""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, Regex, Tokenizer, models, normalizers, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from afm_struct.errors import ContextOverflowError
from afm_struct.models.loader import load_tokenizer
from afm_struct.models.prompt_encoder import PromptEncoder
from afm_struct.models.token_bound import _SPACES, COMPOSE_MAX, TokenBound, token_bound

from .gguf_factory import FAMILIES, tiny_gguf

EXAMPLES = int(os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES", "0")) or 40
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))

# Pieces that make few tokens out of many characters, or many characters out of few.
RUNS = ["=", " ", "\n", "\t", "-", "#", "a", "é", "e\u0301", "\u1100\u1161\u11a8", "\u00a0",
        "\u3000", "ﬁ", "\u1f82", "\u03b1\u0313\u0300\u0345", "<|im_end|>", "<s>", "<x>", "😀", "\x1c"]


def texts(pieces: list[str]) -> st.SearchStrategy[str]:
    """Texts mixing arbitrary unicode, long runs of one piece and the vocabulary's longest
    pieces."""
    run = st.builds(lambda p, n: p * n, st.sampled_from(RUNS + pieces), st.integers(1, 400))
    return st.lists(st.one_of(st.text(max_size=40), run, st.sampled_from(pieces or ["x"])),
                    max_size=12).map("".join)


def _fast(tok: Tokenizer) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(tokenizer_object=tok, clean_up_tokenization_spaces=False)


def _char_bpe(*, byte_fallback: bool = True) -> Tokenizer:
    """A character BPE, SentencePiece style: every byte as a fallback piece, or a one-character
    unknown piece (then the longest piece is 4 characters, so a normalizer that composes three
    jamo into a syllable piece shows whether composition is accounted for)."""
    chars = sorted(set("abcdefghijklmnopqrstuvwxyz▁é\u1100\u1161\u11a8각=-#"))
    vocab = {"?": 0}
    if byte_fallback:
        vocab.update({f"<0x{b:02X}>": b + 1 for b in range(256)})
    for c in [*chars, "ab", "abc", "▁a", "==", "====", "▁▁", "▁▁▁▁", "각각", "각각각각"]:
        vocab.setdefault(c, len(vocab))
    merges = [("a", "b"), ("ab", "c"), ("▁", "a"), ("=", "="), ("==", "=="), ("▁", "▁"),
              ("▁▁", "▁▁"), ("각", "각"), ("각각", "각각")]
    return Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="?", byte_fallback=byte_fallback,
                                fuse_unk=byte_fallback))


def spm_nfkc() -> PreTrainedTokenizerFast:
    tok = _char_bpe(byte_fallback=False)
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(" ", "▁")])
    return _fast(tok)


def whitespace_split() -> PreTrainedTokenizerFast:
    tok = _char_bpe()
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return _fast(tok)


def stripping_added_token() -> PreTrainedTokenizerFast:
    tok = _char_bpe()
    tok.add_special_tokens([AddedToken("<x>", rstrip=True, lstrip=True)])
    return _fast(tok)


BUILT = {"spm_nfkc": spm_nfkc, "whitespace_split": whitespace_split,
         "stripping_added_token": stripping_added_token}


@pytest.fixture(scope="module")
def family_tokenizers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    directory: Path = tmp_path_factory.mktemp("gguf-tok")
    return {name: load_tokenizer(str(tiny_gguf(name, directory)[1])) for name in sorted(FAMILIES)}


def _check_sound(hf: Any, bound: TokenBound | None, text: str) -> None:
    assert bound is not None
    n = len(hf.encode(text, add_special_tokens=False))
    assert bound.fewest_tokens(text) <= n, (bound, len(text), n)


def _longest_pieces(hf: Any) -> list[str]:
    vocab = hf.get_vocab()
    longest = sorted(vocab, key=len, reverse=True)[:20]
    return [p for p in (hf.decode([vocab[k]]) for k in longest) if p]


def test_the_constants_match_unicode() -> None:
    assert max(len(unicodedata.normalize("NFD", chr(c))) for c in range(0x110000)) == COMPOSE_MAX
    assert set(_SPACES) == {chr(c) for c in range(0x110000) if chr(c).isspace()}


def test_the_embedded_tokenizer_has_a_byte_level_bound(tokenizer) -> None:
    bound = tokenizer.token_bound
    assert bound == TokenBound(chars_per_token=max(map(len, tokenizer.hf.get_vocab())))
    assert bound.fewest_tokens("") == 0
    assert bound.fewest_tokens("x" * bound.chars_per_token) == 1
    assert bound.fewest_tokens("x" * (bound.chars_per_token + 1)) == 2


@SETTINGS
@given(data=st.data())
def test_sound_on_the_embedded_tokenizer(tokenizer, data) -> None:
    _check_sound(tokenizer.hf, tokenizer.token_bound, data.draw(texts(_longest_pieces(tokenizer.hf))))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_gguf_family_has_a_sound_bound(family_tokenizers, family) -> None:
    hf = family_tokenizers[family].hf
    bound = token_bound(hf)
    pieces = _longest_pieces(hf)

    @SETTINGS
    @given(text=texts(pieces))
    def sound(text: str) -> None:
        _check_sound(hf, bound, text)

    sound()


@pytest.mark.parametrize("name", sorted(BUILT))
def test_sound_where_characters_compose_or_whitespace_vanishes(name) -> None:
    hf = BUILT[name]()
    bound = token_bound(hf)
    assert bound is not None
    if name == "spm_nfkc":
        assert bound.compose == COMPOSE_MAX and bound.spaces_count
    else:
        assert not bound.spaces_count
    pieces = _longest_pieces(hf)

    @SETTINGS
    @given(text=texts(pieces))
    def sound(text: str) -> None:
        _check_sound(hf, bound, text)

    sound()


def _no_bound_cases() -> dict[str, Tokenizer]:
    vocab = {"[UNK]": 0, "a": 1, "b": 2}
    fused = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="[UNK]", fuse_unk=True))
    regex = _char_bpe()
    regex.normalizer = normalizers.Replace(Regex(r"\s+"), " ")
    accents = _char_bpe()
    accents.normalizer = normalizers.StripAccents()
    delimiter = _char_bpe()
    delimiter.pre_tokenizer = pre_tokenizers.CharDelimiterSplit("a")
    removed = _char_bpe()
    removed.pre_tokenizer = pre_tokenizers.Split(" ", behavior="removed")
    return {
        "wordpiece": Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]")),
        "wordlevel": Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]")),
        "fused_unknowns": fused,
        "unknowns_dropped": Tokenizer(models.BPE(vocab=vocab, merges=[])),
        "unigram_without_byte_fallback": Tokenizer(models.Unigram([("[UNK]", 0.0), ("a", -1.0)], 0)),
        "regex_replace": regex, "strip_accents": accents, "char_delimiter": delimiter,
        "split_removed": removed,
    }


@pytest.mark.parametrize("name", sorted(_no_bound_cases()))
def test_no_bound_where_one_token_can_hold_unbounded_text(name) -> None:
    tok = _no_bound_cases()[name]
    assert token_bound(_fast(tok)) is None


def test_encode_chat_refuses_before_tokenizing(tokenizer, monkeypatch) -> None:
    limit = 1000
    per = tokenizer.token_bound.chars_per_token
    template = tokenizer.apply_chat_template([{"role": "user", "content": ""}])
    fits = "x" * ((limit - 1) * per - len(template))  # at least limit - 1 tokens: may fit
    assert tokenizer.token_bound.fewest_tokens(tokenizer.apply_chat_template(
        [{"role": "user", "content": fits}])) == limit - 1
    assert len(tokenizer.encode_chat([{"role": "user", "content": fits}], context_length=limit)) > 0
    encoded: list[str] = []
    monkeypatch.setattr(PromptEncoder, "encode", lambda self, text, *a, **kw: encoded.append(text) or [1])
    with pytest.raises(ContextOverflowError) as err:
        tokenizer.encode_chat([{"role": "user", "content": fits + "x"}], context_length=limit)
    assert encoded == []
    assert err.value.param == "messages"
    assert f"so at least {limit} tokens" in err.value.message
    assert f"maximum context length is {limit} tokens" in err.value.message
