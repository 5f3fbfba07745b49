"""Sets of code points as sorted, merged, inclusive intervals (the alphabet of :mod:`.regular`)."""

from __future__ import annotations

import bisect
from collections.abc import Iterable

MAX_CP = 0x10FFFF
FULL: tuple[tuple[int, int], ...] = ((0, MAX_CP),)
NEWLINE: tuple[tuple[int, int], ...] = ((10, 10),)
# UTF-16 surrogates are no scalar value: no string holds one, no regex class should name one.
SURROGATES: tuple[tuple[int, int], ...] = ((0xD800, 0xDFFF),)


def normalize(intervals: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Sorted, merged, non-overlapping inclusive intervals."""
    out: list[list[int]] = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((a, b) for a, b in out)


def complement(intervals: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """The code points not in ``intervals``."""
    out, start = [], 0
    for lo, hi in intervals:
        if lo > start:
            out.append((start, lo - 1))
        start = hi + 1
    if start <= MAX_CP:
        out.append((start, MAX_CP))
    return tuple(out)


def diff(a: tuple[tuple[int, int], ...], b: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """Code points in ``a`` and not in ``b`` (both normalized)."""
    out: list[tuple[int, int]] = []
    j = 0
    for lo, hi in a:
        while j < len(b) and b[j][1] < lo:
            j += 1
        k = j
        while lo <= hi:
            if k >= len(b) or b[k][0] > hi:
                out.append((lo, hi))
                break
            if b[k][0] > lo:
                out.append((lo, b[k][0] - 1))
            lo = max(lo, b[k][1] + 1)
            k += 1
    return tuple(out)


def subset(a: tuple[tuple[int, int], ...], b: tuple[tuple[int, int], ...]) -> bool:
    """True when every code point of ``a`` is in ``b``."""
    return not diff(a, b)


def within(cp: int, intervals: tuple[tuple[int, int], ...]) -> bool:
    """True when code point ``cp`` is in ``intervals`` (normalized)."""
    i = bisect.bisect_right(intervals, (cp, MAX_CP + 1)) - 1
    return i >= 0 and intervals[i][0] <= cp <= intervals[i][1]
