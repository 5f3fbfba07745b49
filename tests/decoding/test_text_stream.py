"""Stop sequences across token boundaries and UTF-8 safe detokenization."""

from __future__ import annotations

from afm_struct.decoding.detokenizer import StreamingDetokenizer
from afm_struct.decoding.stops import StopMatcher


def test_stop_split_across_chunks_is_never_emitted():
    m = StopMatcher(["END"])
    out = [m.feed(x) for x in ["Hello E", "N", "D and more"]]
    assert "".join(out) == "Hello "
    assert m.stopped


def test_partial_stop_prefix_is_released_when_it_does_not_match():
    m = StopMatcher(["STOP"])
    assert m.feed("abc ST") == "abc "
    assert m.feed("ART") == "START"
    assert m.feed("x ST") == "x "
    assert m.flush() == "ST"
    assert not m.stopped


def test_earliest_of_several_stops_wins():
    m = StopMatcher(["world", "lo w"])
    assert m.feed("hello world") == "hel"


def test_detokenizer_never_splits_a_character(tokenizer):
    text = "a😀b👨‍👩‍👧c日本"
    ids = tokenizer.encode(text)
    singles = [tokenizer.decode([i]) for i in ids]
    assert any("\ufffd" in s for s in singles), "the test needs a character split across tokens"
    d = StreamingDetokenizer(tokenizer)
    pieces = [d.add(i) for i in ids] + [d.flush()]
    assert all("\ufffd" not in p for p in pieces)
    assert "".join(pieces) == text
