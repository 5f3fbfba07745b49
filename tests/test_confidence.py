"""Per-field confidence: JSON leaves by offset, token overlap, and extract(..., logprobs=True)."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel, ConfigDict

import afm_struct
from afm_struct.decoding.logprobs import TokenLogprob
from afm_struct.library.confidence import FieldConfidence, field_confidence, json_leaves
from afm_struct.testing import scripted_loaded_model


def test_leaves_have_paths_and_the_spans_of_their_text():
    text = ' {"a": {"city": "Paris", "zip": 75001}, "items": [true, null, "x"], "e": [], "o": {},' \
           ' "we ird": "", "n": -1.5e3}'
    leaves = {leaf.path: text[leaf.start:leaf.end] for leaf in json_leaves(text)}
    assert leaves == {"$.a.city": "Paris", "$.a.zip": "75001", "$.items[0]": "true", "$.items[1]": "null",
                      "$.items[2]": "x", "$.e": "[]", "$.o": "{}", '$["we ird"]': '""', "$.n": "-1.5e3"}
    assert [leaf.path for leaf in json_leaves('"top"')] == ["$"]
    with pytest.raises(ValueError):
        json_leaves('{"a": 1} trailing')
    with pytest.raises(ValueError):
        json_leaves('{"a" 1}')


def test_escapes_keep_offsets_in_the_text():
    text = '{"q": "say \\"hi\\"", "k\\u00e9": 2}'
    leaves = {leaf.path: text[leaf.start:leaf.end] for leaf in json_leaves(text)}
    assert leaves == {"$.q": 'say \\"hi\\"', '$["ké"]': "2"}  # non-ASCII keys are quoted


def tok(text: str, offset: int, logprob: float) -> TokenLogprob:
    return TokenLogprob(text, 0, logprob, tuple(text.encode()), (), offset, offset + len(text))


def tokens_of(pieces: list[tuple[str, float]], start: int = 0) -> list[TokenLogprob]:
    out, at = [], start
    for piece, lp in pieces:
        out.append(tok(piece, at, lp))
        at += len(piece)
    return out


def test_mean_and_min_of_the_tokens_overlapping_each_value():
    pieces = [('{"', 0.0), ("city", 0.0), ('":', 0.0), (' "', -0.1), ("Par", -0.5), ("is", -0.2),
              ('",', -1.0), (' "', 0.0), ("n", 0.0), ('":', 0.0), (" 4", -2.0), ("2", -0.4), ("}", -0.3)]
    text = "".join(p for p, _ in pieces)
    assert json.loads(text) == {"city": "Paris", "n": 42}
    conf = field_confidence(text, tokens_of(pieces))
    assert conf["$.city"] == FieldConfidence(-0.35, -0.5, 2, "Paris")  # not the quotes' tokens
    assert conf["$.n"].min_logprob == -2.0 and conf["$.n"].tokens == 2
    assert conf["$.n"].mean_logprob == pytest.approx(-1.2)
    assert conf["$.n"].probability == pytest.approx(2.718281828459045 ** -2.0)
    # sanitized text cut out of a longer output: offsets shift by base
    shifted = field_confidence(text, tokens_of([("```json\n", -3.0), *pieces]), base=8)
    assert shifted == conf
    assert field_confidence("not json", tokens_of(pieces)) == {}


class Person(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    age: int


def test_extract_with_logprobs_on_a_scripted_model(tokenizer):
    lm = scripted_loaded_model(tokenizer, '{"name": "Ada", "age": 36}')
    plain = afm_struct.extract("Ada is 36.", Person, model=lm)
    assert plain.confidence is None and plain.token_logprobs is None  # the default is unchanged
    result = afm_struct.extract("Ada is 36.", Person, model=lm, logprobs=True)
    assert result.value == plain.value == Person(name="Ada", age=36)
    assert set(result.confidence) == {"$.name", "$.age"}
    assert result.confidence["$.name"].text == "Ada" and result.confidence["$.age"].text == "36"
    for c in result.confidence.values():
        assert c.min_logprob <= c.mean_logprob <= 0 and c.tokens >= 1
    assert "".join(e.token for e in result.token_logprobs) == result.raw_text


@pytest.mark.model
def test_extract_with_logprobs_on_the_embedded_model(embedded):
    class City(BaseModel):
        model_config = ConfigDict(extra="forbid")
        city: str
        country: str

    result = afm_struct.extract("Extract the place as JSON: the Eiffel Tower is in Paris, France.", City,
                                model=embedded, logprobs=True)
    assert set(result.confidence) == {"$.city", "$.country"}
    for path, c in result.confidence.items():
        assert c.text == getattr(result.value, path[2:])
        assert -50 < c.min_logprob <= c.mean_logprob <= 0
    # a real model is not certain of everything it sampled
    assert any(e.logprob < 0 for e in result.token_logprobs if e.sampled)
