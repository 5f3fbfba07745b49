"""StopMatcher on the marker scanner: the cut never depends on how the text came in tokens."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from afm_struct.decoding.stops import StopMatcher


class _OldStopMatcher:
    """afm_struct/decoding/stops.py before it used afm_struct.text (a81ca45), verbatim."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = tuple(s for s in stops if s)
        self._held = ""
        self.stopped = False

    def feed(self, text: str) -> str:
        if not self.stops:
            return text
        buf = self._held + text
        cut = min((i for i in (buf.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self._held = ""
            self.stopped = True
            return buf[:cut]
        keep = self._partial_suffix(buf)
        self._held = buf[len(buf) - keep:] if keep else ""
        return buf[: len(buf) - keep]

    def flush(self) -> str:
        out, self._held = self._held, ""
        return out

    def _partial_suffix(self, buf: str) -> int:
        best = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(buf)), best, -1):
                if buf.endswith(stop[:n]):
                    best = n
                    break
        return best


stops_st = st.lists(st.text("ab\n:", min_size=0, max_size=4), max_size=3)
chunks_st = st.lists(st.text("ab\n:x", max_size=6), max_size=10)


def _run(m: StopMatcher | _OldStopMatcher, chunks: list[str]) -> list[str]:
    out = []
    for c in chunks:
        out.append(m.feed(c))
        if m.stopped:
            return out
    return [*out, m.flush()]


def _leftmost_cut(stops: list[str], text: str) -> tuple[str, bool]:
    hits = [i for i in (text.find(s) for s in stops if s) if i >= 0]
    return (text[:min(hits)], True) if hits else (text, False)


@settings(max_examples=500, deadline=None)
@given(stops_st, chunks_st)
def test_the_text_is_cut_at_the_first_stop_in_it_whatever_the_tokens(stops, chunks):
    m = StopMatcher(stops)
    assert ("".join(_run(m, chunks)), m.stopped) == _leftmost_cut(stops, "".join(chunks))


@settings(max_examples=500, deadline=None)
@given(stops_st, chunks_st)
def test_same_as_the_old_matcher_call_for_call_unless_a_stop_sits_inside_another(stops, chunks):
    # The old matcher cut at the first stop to complete; with a stop inside another (not at its
    # start) that one could complete first although the other began earlier in the text.
    assume(not any(a and b and a != b and b in a[1:] for a in stops for b in stops))
    new, old = StopMatcher(stops), _OldStopMatcher(stops)
    assert _run(new, chunks) == _run(old, chunks)
    assert new.stopped == old.stopped


def test_a_stop_inside_a_longer_one_waits_for_it():
    m = StopMatcher(["abcd", "bc"])
    assert m.feed("xab") == "x" and m.feed("c") == "" and not m.stopped
    assert m.feed("d") == "" and m.stopped  # the old matcher had stopped at "bc", giving "xa"
    m = StopMatcher(["abcd", "bc"])
    assert m.feed("xabc") == "x" and m.flush() == "a" and m.stopped  # ended: cut at "bc"
