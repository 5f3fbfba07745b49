"""The real embedded SmolLM2-135M, end to end (answers checked by hand first)."""

from __future__ import annotations

import pytest

from afm_struct.decoding.generator import Finished, GenerationRequest, Generator
from afm_struct.decoding.sampling import SamplingParams

pytestmark = pytest.mark.model


def answer(embedded, question: str, **params) -> Finished:
    gen = Generator.from_loaded(embedded)
    ids = embedded.tokenizer.encode_chat([{"role": "user", "content": question}])
    *_, fin = gen.generate(GenerationRequest(ids, SamplingParams(**params)))
    assert isinstance(fin, Finished)
    return fin


def test_loads_as_fp32_on_cpu(embedded):
    assert embedded.info.source == "embedded"
    assert embedded.info.device == "cpu"
    assert embedded.info.weights == "float32"
    assert embedded.info.context_length == 8192


def test_answers_a_simple_question(embedded):
    fin = answer(embedded, "What is the capital of France?", temperature=0, max_tokens=30)
    assert fin.reason == "stop"  # ends with <|im_end|>, which is not emitted
    assert "Paris" in fin.text
    assert "<|im_end|>" not in fin.text


def test_seeded_sampling_is_reproducible(embedded):
    a = answer(embedded, "Name a color.", temperature=0.9, seed=11, max_tokens=12)
    b = answer(embedded, "Name a color.", temperature=0.9, seed=11, max_tokens=12)
    assert a.text == b.text
    assert a.usage.completion_tokens == b.usage.completion_tokens
