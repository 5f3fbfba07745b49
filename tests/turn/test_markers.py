"""The marker scanner: chunking never changes the pieces, held text is bounded, nothing is lost."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from afm_struct.turn.markers import Marker, MarkerScanner
from afm_struct.turn.reasoning import ReasoningSplitter

ALPHABET = "ab<>/ "  # small, so markers overlap and partial matches are common
markers_st = st.lists(st.text(ALPHABET, min_size=1, max_size=5), min_size=1, max_size=4, unique=True)
text_st = st.text(ALPHABET, max_size=60)


def _cuts(text: str, cuts: list[int]) -> list[str]:
    at = sorted({min(c, len(text)) for c in cuts})
    return [text[i:j] for i, j in zip([0, *at], [*at, len(text)], strict=True)]


def _normal(pieces: list[str | Marker]) -> list[str | Marker]:
    """Adjacent literal text merged (chunking may split text, never markers)."""
    out: list[str | Marker] = []
    for p in pieces:
        if isinstance(p, str) and out and isinstance(out[-1], str):
            out[-1] += p
        elif p != "":
            out.append(p)
    return out


def _scan(markers: list[str], chunks: list[str], *, held: list[str] | None = None) -> list[str | Marker]:
    scan = MarkerScanner(markers)
    pieces: list[str | Marker] = []
    for chunk in chunks:
        pieces += scan.feed(chunk)
        if held is not None:
            held.append(scan.held)
    pieces += scan.feed("", final=True)
    assert scan.held == ""
    return pieces


def _reference(markers: list[str], text: str) -> list[str | Marker]:
    """Leftmost-shortest, written the slow obvious way."""
    out: list[str | Marker] = []
    i, lit = 0, ""
    by_len = sorted(markers, key=len)
    while i < len(text):
        hit = next((m for m in by_len if text.startswith(m, i)), None)
        if hit is None:
            lit += text[i]
            i += 1
            continue
        out += [lit, Marker(hit)] if lit else [Marker(hit)]
        lit, i = "", i + len(hit)
    return out + ([lit] if lit else [])


@settings(max_examples=400, deadline=None)
@given(markers_st, text_st, st.lists(st.integers(0, 60), max_size=12))
def test_any_chunking_gives_the_pieces_of_the_whole_text(markers, text, cuts):
    whole = _scan(markers, [text])
    assert _normal(whole) == _reference(markers, text)
    assert _normal(_scan(markers, _cuts(text, cuts))) == _normal(whole)
    assert _normal(_scan(markers, list(text))) == _normal(whole)


@settings(max_examples=400, deadline=None)
@given(markers_st, text_st, st.lists(st.integers(0, 60), max_size=12))
def test_held_text_is_shorter_than_the_longest_marker_and_nothing_is_lost(markers, text, cuts):
    held: list[str] = []
    pieces = _scan(markers, _cuts(text, cuts), held=held)
    longest = max(map(len, markers))
    assert all(len(h) <= longest - 1 for h in held)
    assert "".join(p.text if isinstance(p, Marker) else p for p in pieces) == text


@settings(max_examples=300, deadline=None)
@given(st.tuples(markers_st, markers_st), text_st, st.lists(st.integers(0, 60), max_size=12))
def test_switching_tables_after_each_match_is_chunking_independent(tables, text, cuts):
    def run(chunks: list[str]) -> list[str | Marker]:
        scan, which, out = MarkerScanner(tables[0]), 0, []
        for i, chunk in enumerate([*chunks, ""]):
            for p in scan.feed(chunk, final=i == len(chunks)):
                out.append(p)
                if isinstance(p, Marker):
                    which = 1 - which
                    scan.markers = tables[which]
        return out

    whole = run([text])
    assert _normal(run(_cuts(text, cuts))) == _normal(whole)
    assert "".join(p.text if isinstance(p, Marker) else p for p in whole) == text


def _split(splitter: ReasoningSplitter, chunks: list[str]) -> list[tuple[str, str]]:
    out = [x for c in chunks for x in splitter.feed(c)] + splitter.feed("", final=True)
    merged: list[tuple[str, str]] = []
    for ch, t in out:
        if merged and merged[-1][0] == ch:
            merged[-1] = (ch, merged[-1][1] + t)
        else:
            merged.append((ch, t))
    return merged


@settings(max_examples=300, deadline=None)
@given(st.text("<think/>ab \n", max_size=60), st.lists(st.integers(0, 60), max_size=12), st.booleans())
def test_reasoning_split_does_not_depend_on_chunking(text, cuts, opened):
    def make() -> ReasoningSplitter:
        return ReasoningSplitter(("<think>", "</think>"), start_in_reasoning=opened)

    assert _split(make(), _cuts(text, cuts)) == _split(make(), [text]) == _split(make(), list(text))


def test_partial_marker_is_held_then_released_as_text():
    scan = MarkerScanner(["</think>"])
    assert list(scan.feed("abc</th")) == ["abc"]
    assert scan.held == "</th"
    assert list(scan.feed("", final=True)) == ["</th"]


def test_an_earlier_marker_that_may_complete_wins_over_a_later_complete_one():
    scan = MarkerScanner(["abcd", "bc"])
    assert list(scan.feed("xabc")) == ["x"]  # "bc" is complete, but "abcd" may still be
    assert list(scan.feed("d")) == [Marker("abcd")]
    scan = MarkerScanner(["abcd", "bc"])
    assert list(scan.feed("xabc")) + list(scan.feed("e")) == ["x", "a", Marker("bc"), "e"]


def test_the_shortest_of_markers_starting_together_wins_at_once():
    assert list(MarkerScanner(["abc", "ab"]).feed("ab")) == [Marker("ab")]


def test_take_returns_what_the_consumer_did_not_read():
    scan = MarkerScanner(["[TOOL]"])
    for piece in scan.feed("hi [TOOL] {rest"):
        if isinstance(piece, Marker):
            break
    assert scan.take() == " {rest" and scan.held == ""


def test_no_markers_passes_text_through_and_empty_markers_are_refused():
    assert list(MarkerScanner().feed("<think>")) == ["<think>"]
    with pytest.raises(ValueError):
        MarkerScanner(["a", ""])


def test_reasoning_splitter_rule():
    s = ReasoningSplitter(("<think>", "</think>"))
    assert _split(s, ["a<think>r</think>\n\n b", " c <"]) == [
        ("answer", "a"), ("reasoning", "r"), ("answer", "b c <")]
    assert _split(ReasoningSplitter(None), ["<think>x"]) == [("answer", "<think>x")]
    s = ReasoningSplitter(("<think>", "</think>"), start_in_reasoning=True)
    assert _split(s, ["r</think>", "  ", "", "a"]) == [("reasoning", "r"), ("answer", "a")]


def test_a_tag_cut_by_the_end_is_dropped():
    # The budget (or the closer's completion, cut) ended inside a tag: structure, not text, in
    # the answer and in the reasoning; a lone "<" is as likely text (issue 33).
    assert _split(ReasoningSplitter(("<think>", "</think>")), ["b c <th"]) == [("answer", "b c ")]
    s = ReasoningSplitter(("<think>", "</think>"), start_in_reasoning=True)
    assert _split(s, ["r</thi"]) == [("reasoning", "r")]
    harmony = ReasoningSplitter(("<|channel|>analysis<|message|>", "<|end|>"))
    assert _split(harmony, ["<|channel|>analysis<"]) == []


def test_tags_that_open_or_close_nothing_are_dropped():
    # A model repeating its open tag inside the block, or closing one it never opened: tags are
    # structure, never text (issue 33: qwen3's <think> inside reasoning_content).
    s = ReasoningSplitter(("<think>", "</think>"))
    assert _split(s, ["a</think>b<think>r<thi", "nk>s</think>c"]) == [
        ("answer", "ab"), ("reasoning", "rs"), ("answer", "c")]
