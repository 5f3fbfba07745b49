"""Per-field confidence of a generated JSON value, from its tokens' logprobs.

Each leaf of the JSON text (a string, number, boolean or null, or an empty object or array) is
located by character offsets; the tokens whose text overlaps the leaf's text give its
confidence: the mean and the minimum of their logprobs.  A string's text is what lies between
its quotes (an empty string's: the quotes), so a token that only closes the string and opens
the next key (``",``) does not count for the value.  Forced tokens (logprob 0.0: the grammar
allowed nothing else) count as certain; the minimum is the number to watch.

Paths are JSONPath-like: ``$.address.city``, ``$.items[0]``, ``$["a key"]``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..decoding.logprobs import TokenLogprob

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WS = " \t\r\n"
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class FieldConfidence:
    """How sure the model was of one leaf value."""

    mean_logprob: float  # mean over the value's tokens
    min_logprob: float  # the least likely of them
    tokens: int  # how many tokens overlap the value's text
    text: str  # the value as written

    @property
    def probability(self) -> float:
        """``exp(min_logprob)``: the probability of the value's least likely token."""
        return math.exp(self.min_logprob)


@dataclass(frozen=True)
class Leaf:
    """A leaf's path and its text's span ``[start, end)``."""

    path: str
    start: int
    end: int


def _key_path(path: str, key: str) -> str:
    return f"{path}.{key}" if _IDENT.fullmatch(key) else f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def json_leaves(text: str) -> list[Leaf]:
    """The leaves of the JSON value at the start of ``text`` (leading whitespace allowed).

    Raises ``ValueError`` when the text is not JSON.
    """
    leaves: list[Leaf] = []
    end = _value(text, _skip(text, 0), "$", leaves)
    if text[_skip(text, end):].strip():
        raise ValueError(f"extra data after the JSON value at {end}")
    return leaves


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _expect(text: str, i: int, ch: str) -> int:
    i = _skip(text, i)
    if text[i:i + 1] != ch:
        raise ValueError(f"expected {ch!r} at {i}")
    return i + 1


def _value(text: str, i: int, path: str, leaves: list[Leaf]) -> int:
    """Parse the value at ``i``; record its leaves; return the index after it."""
    ch = text[i:i + 1]
    if ch == "{":
        return _object(text, i, path, leaves)
    if ch == "[":
        return _array(text, i, path, leaves)
    if ch == '"':
        _, end = json.decoder.scanstring(text, i + 1)  # type: ignore[attr-defined]
        inner = (i + 1, end - 1) if end - i > 2 else (i, end)  # "" : the quotes themselves
        leaves.append(Leaf(path, *inner))
        return int(end)
    _, end = _DECODER.raw_decode(text, i)  # a number, true, false or null
    leaves.append(Leaf(path, i, end))
    return int(end)


def _object(text: str, i: int, path: str, leaves: list[Leaf]) -> int:
    j = _skip(text, i + 1)
    if text[j:j + 1] == "}":
        leaves.append(Leaf(path, i, j + 1))
        return j + 1
    while True:
        j = _skip(text, j)
        if text[j:j + 1] != '"':
            raise ValueError(f"expected a key at {j}")
        key, j = json.decoder.scanstring(text, j + 1)  # type: ignore[attr-defined]
        j = _skip(text, _expect(text, j, ":"))
        j = _skip(text, _value(text, j, _key_path(path, key), leaves))
        if text[j:j + 1] == "}":
            return j + 1
        j = _expect(text, j, ",")


def _array(text: str, i: int, path: str, leaves: list[Leaf]) -> int:
    j = _skip(text, i + 1)
    if text[j:j + 1] == "]":
        leaves.append(Leaf(path, i, j + 1))
        return j + 1
    index = 0
    while True:
        j = _skip(text, _value(text, _skip(text, j), f"{path}[{index}]", leaves))
        index += 1
        if text[j:j + 1] == "]":
            return j + 1
        j = _expect(text, j, ",")


def field_confidence(text: str, entries: Sequence[TokenLogprob], *,
                     base: int = 0) -> dict[str, FieldConfidence]:
    """Confidence per leaf path of the JSON ``text``, from token ``entries`` whose offsets index
    the generated text, in which ``text`` starts at ``base`` (non-zero when it was sanitized out
    of a longer output).  Leaves no token overlaps (cannot happen for generated text) are left
    out; ``{}`` for text that is not JSON."""
    try:
        leaves = json_leaves(text)
    except ValueError:
        return {}
    out: dict[str, FieldConfidence] = {}
    for leaf in leaves:
        lo, hi = leaf.start + base, leaf.end + base
        values = [e.logprob for e in entries if e.offset < hi and e.end > lo]
        if values:
            out[leaf.path] = FieldConfidence(sum(values) / len(values), min(values), len(values),
                                             text[leaf.start:leaf.end])
    return out
