"""llguidance's view of a tokenizer, built without llguidance.hf's defensive copy."""

from __future__ import annotations

import copy

import llguidance
import llguidance.hf

from afm_struct.grammar.engines.llguidance_engine import ll_tokenizer_for
from afm_struct.models.tokenizer import Tokenizer

TEXTS = ["hello world", '{"a": [1, 2.5e3, "x\\u00e9", null]}', "  \n\t日本語 <|im_end|> 🙂", ""]


def _same(a: llguidance.LLTokenizer, b: llguidance.LLTokenizer) -> None:
    assert (a.vocab_size, a.eos_token) == (b.vocab_size, b.eos_token)
    assert all(a.decode_bytes([i]) == b.decode_bytes([i]) for i in range(a.vocab_size))
    assert all(a.is_special_token(i) == b.is_special_token(i) for i in range(a.vocab_size))
    for text in TEXTS:
        assert a.tokenize_str(text) == b.tokenize_str(text), text


def test_the_direct_build_is_what_llguidance_hf_builds(tokenizer: Tokenizer) -> None:
    reference = llguidance.hf.from_tokenizer(tokenizer.hf, n_vocab=int(tokenizer.vocab_size))
    _same(ll_tokenizer_for(tokenizer), reference)


def test_a_tokenizer_that_pads_or_truncates_goes_through_llguidance_hf(tokenizer: Tokenizer) -> None:
    """Padding or truncation in the Rust tokenizer would be serialized into llguidance's copy:
    then the build takes llguidance.hf's path, which switches them off first."""
    hf = copy.deepcopy(tokenizer.hf)
    hf.backend_tokenizer.enable_truncation(8)
    hf.backend_tokenizer.enable_padding(length=16)
    padded = Tokenizer(hf, eos_ids=sorted(tokenizer.eos_token_ids), add_bos=tokenizer.add_bos,
                       vocab_size=tokenizer.vocab_size)
    built = ll_tokenizer_for(padded)
    assert len(built.tokenize_str("a long text " * 20)) > 8  # not truncated
    _same(built, ll_tokenizer_for(tokenizer))
