"""The candidate tokens of the closing search and the text scan that orders them.

:mod:`afm_struct.grammar.closer.completion` steps a small candidate vocabulary (:class:`ClosingVocab`):
tokens made of closers (``"`` ``]`` ``}``) and separators, one-token minimal values (``0``,
``""``, ``false``, ``null``, ``[]``, ``{}``), single printable characters (patterns, enums,
digits of a number) and the tokenizer's special tokens (a tool format's close tag).  Each has a
*kind* (its rank class): the first four (closer, special, separator, value) are **structural**,
the rest content.  A state where no structural candidate is allowed is inside a value the grammar
has not let end yet (a pattern, a format, a number that is not yet a multiple, an enum's word).

:func:`scan` tracks a loose JSON nesting along the text (open brackets plus an open string);
:func:`walk` extends it with what a search needs to tell two states apart besides the mask:
separators seen and the length of the value being written.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ...models.tokenizer import Tokenizer

# Characters that end an open value, and those that separate values.
CLOSERS = frozenset('"]}')
SEPARATORS = frozenset(",:")
# Complete JSON values written as one token, cheapest first (tried where a value may start).
MINIMAL_VALUES = ("0", '""', "false", "null", "[]", "{}", "true", "1")
# Candidate kinds (the first element of :func:`_rank`); up to VALUE they are structural.
CLOSER, SPECIAL, SEPARATOR, VALUE, DIGIT, LETTER, OTHER, SPACE = 0, 1, 2, 3, 4, 5, 6, 8

# Scanner state: (open brackets, inside a string, right after a backslash in a string).
Depth = tuple[int, bool, bool]
START: Depth = (0, False, False)
# What a search tracks along a path: the scanner state, separators written (outside strings),
# and characters of the value being written (a string's content, a number's digits).
Trail = tuple[int, bool, bool, int, int]
TRAIL_START: Trail = (0, False, False, 0, 0)


def scan(text: str, state: Depth = START) -> Depth:
    """``state`` after ``text``: JSON nesting, counted loosely (any ``[``/``{`` opens, any
    ``]``/``}`` closes, never below 0; text outside JSON, such as a tool tag, only moves it
    where it has brackets)."""
    return walk(text, (*state, 0, 0))[:3]  # type: ignore[return-value]


def walk(text: str, trail: Trail) -> Trail:
    """``trail`` after ``text`` (see :data:`Trail`)."""
    depth, in_str, esc, seps, run = trail
    for c in text:
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str, run = False, 0
                continue
            run += 1
        elif c == '"':
            in_str, run = True, 0
        elif c in "[{":
            depth, run = depth + 1, 0
        elif c in "]}":
            depth, run = max(depth - 1, 0), 0
        elif c in ",:":
            seps, run = seps + 1, 0
        elif c in " \n\r\t":
            run = 0
        else:
            run += 1
    return depth, in_str, esc, seps, run


def open_string(text: str, *, in_string: bool = False) -> str | None:
    """The raw (JSON-escaped) content of the string ``text`` ends inside, from its opening
    quote; None when ``text`` ends outside a string, or inside one it did not open (starting
    ``in_string``)."""
    in_str, esc, start = in_string, False, None
    for i, c in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str, start = True, i + 1
    return text[start:] if in_str and start is not None else None


def follow(text: str, state: Depth, content: str | None, *, limit: int = 4096) -> tuple[Depth, str | None]:
    """``(state, content)`` after ``text``: :func:`scan`'s state and the raw content of the
    string the text ends inside (None outside strings, or when unknown: it started before what
    was followed with no ``content`` given, or is longer than ``limit`` characters)."""
    depth, in_str, esc = state
    start = None  # where the string open at the end began, if it began in ``text``
    for i, c in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str, start = True, i + 1
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth = max(depth - 1, 0)
    if not in_str:
        return (depth, in_str, esc), None
    if start is not None:
        raw: str | None = text[start:]
    else:
        raw = None if content is None else content + text
    return (depth, in_str, esc), raw if raw is None or len(raw) <= limit else None


def _punctuation(c: str) -> bool:
    return c.isprintable() and not c.isalnum() and c not in ' "\\'


def _content(text: str, in_str: bool) -> int:
    """Characters of ``text`` that land inside a string, starting in or out of one."""
    count, esc = 0, False
    for c in text:
        if in_str:
            if esc or c == "\\":
                esc = not esc and c == "\\"
                count += 1
            elif c == '"':
                in_str = False
            else:
                count += 1
        elif c == '"':
            in_str = True
    return count


def nesting(state: Sequence[Any]) -> int:
    """How much is open: brackets plus an open string."""
    return int(state[0]) + int(state[1])


def _rank(text: str) -> tuple[int, ...] | None:
    """Static order of a candidate token's text (lower first); None: not a candidate.

    Tokens that close the most first (``"]}`` before ``"]`` before ``"``), then special tokens,
    bare separators (they end a number: ``12,`` rather than ``120``), minimal values, digits,
    letters, other single characters, whitespace.
    """
    if not text:
        return None
    core = text.strip(" ")
    if core and all(c in CLOSERS or c in SEPARATORS for c in core) and len(text) - len(core) <= 1:
        closers = sum(c in CLOSERS for c in core)
        if closers:
            return (CLOSER, -closers, len(core) - closers, len(text))
        return (SEPARATOR, len(text))
    if text in MINIMAL_VALUES:
        return (VALUE, MINIMAL_VALUES.index(text))
    if core and all(c in '"[]{},:' for c in core) and len(text) - len(core) <= 1:
        # Openers mixed with closers (``{}}``, ``[],``, ``{"``): a value and its end in one token.
        return (VALUE, len(MINIMAL_VALUES) + len(core), -sum(c in CLOSERS for c in core))
    if len(text) == 1:
        if text.isascii() and text.isdigit():
            return (DIGIT, int(text))
        if text.isascii() and text.isalpha():
            return (LETTER, text.islower(), ord(text))
        if text.isascii() and text.isprintable() and text != " ":
            return (OTHER, ord(text))
        if text in (" ", "\n"):
            return (SPACE, ord(text))
    return None


class ClosingVocab:
    """The candidate tokens of one tokenizer in static order, with their mask coordinates,
    kinds and their effect on :func:`scan`'s state from the two common starting modes."""

    def __init__(self, tokens: Sequence[int], texts: Sequence[str],
                 kinds: Sequence[int] | None = None) -> None:
        self.tokens = np.asarray(tokens, dtype=np.int64)
        self.texts = list(texts)
        self.kinds = np.asarray(kinds if kinds is not None else [(_rank(t) or (OTHER,))[0] for t in texts],
                                dtype=np.int64)
        self.words = self.tokens // 32
        self.bits = (self.tokens % 32).astype(np.uint32)
        # From inside a string: does the token end it (a closing quote first)?
        self.ends_string = np.array([not scan(t, (0, True, False))[1] for t in self.texts], dtype=bool)
        self.single = np.array([len(t) == 1 for t in self.texts], dtype=bool)
        # One-character tokens that end a number (or any value) where it may end.
        self.enders = [int(t) for t, text in zip(self.tokens, self.texts, strict=True)
                       if text in (",", "]", "}")]
        # Character classes an escape samples from when the whole class is allowed: digits,
        # lower case, upper case, punctuation (a backslash only starts a longer way to the same
        # content; it stays apart, as does the quote).
        self.classes = [np.flatnonzero(self.single & np.array([t.isascii() and test(t) for t in self.texts]))
                        for test in (str.isdigit, str.islower, str.isupper, _punctuation)]
        # Per candidate: its class's index in ``classes`` (-1: none), so that :meth:`characters`
        # counts the members allowed with one bincount instead of a set test per class.
        self.class_of = np.full(len(self.texts), -1, dtype=np.int64)
        for index, members in enumerate(self.classes):
            self.class_of[members] = index
        self.class_sizes = np.array([members.size for members in self.classes], dtype=np.int64)
        self.backslash = np.array([t == "\\" for t in self.texts], dtype=bool)
        self.alnum = np.array([t.isalnum() for t in self.texts], dtype=np.int8)
        self._hinted: dict[frozenset[str], np.ndarray] = {}
        self.newlines = [int(t) for t, text in zip(self.tokens, self.texts, strict=True) if text == "\n"]
        # Sort key: nesting after the token (from depth 64, so the table holds for any depth),
        # then characters it writes inside strings (a quote closing a string beats ``}"``, which
        # adds a ``}`` to the value first), then rank.
        self._after = {in_str: np.array([(d - 64 + int(s)) * 16 + min(_content(t, in_str), 15)
                                         for t in self.texts for d, s, _ in [scan(t, (64, in_str, False))]])
                       for in_str in (False, True)}
        self.text_of = dict(zip(self.tokens.tolist(), self.texts, strict=True))
        # The token of each character that is one, first by rank (a pattern's ending spelled).
        self.char_token: dict[str, int] = {}
        for t, text in zip(self.tokens.tolist(), self.texts, strict=True):
            if len(text) == 1:
                self.char_token.setdefault(text, t)

    def allowed(self, row: np.ndarray) -> np.ndarray:
        """Indices of the candidates ``row`` allows, in static rank order."""
        words = row.view(np.uint32)[self.words]
        return np.flatnonzero((words >> self.bits) & 1)

    def structural(self, ok: np.ndarray, trail: Sequence[Any]) -> bool:
        """Whether any allowed candidate (indices ``ok``) ends the value being written: the
        closing quote inside a string; outside one, a closer, special token or separator, or,
        where no value is under way (a :data:`Trail`'s length 0), a one-token value (``0`` after
        ``36`` is a digit of the number)."""
        if ok.size == 0 or trail[2]:  # right after a backslash only the escaped character may follow
            return False
        if trail[1]:
            return bool(self.ends_string[ok].any())
        top = VALUE if len(trail) < 5 or trail[4] == 0 else SEPARATOR
        return bool((self.kinds[ok] <= top).any())

    def hinted(self, hints: frozenset[str]) -> np.ndarray:
        """Which candidates are characters in ``hints`` (cached per hint set)."""
        hit = self._hinted.get(hints)
        if hit is None:
            hit = np.array([t in hints for t in self.texts], dtype=bool)
            if len(self._hinted) < 256:
                self._hinted[hints] = hit
        return hit

    def characters(self, ok: np.ndarray, hinted: np.ndarray | None = None, *,
                   sample: bool = True) -> np.ndarray:
        """The one-character candidates among ``ok`` an escape steps, the ``hinted`` ones
        (characters the grammar's patterns mention) first.  With ``sample``, of a class (digits,
        lower case, upper case, punctuation) allowed whole only the hinted members and its first
        stay, and a backslash only if hinted or alone."""
        ok = ok[self.single[ok]]
        hint = hinted[ok] if hinted is not None else np.zeros(ok.size, dtype=bool)
        if sample:
            keep = np.ones(ok.size, dtype=bool)
            cls = self.class_of[ok]
            counts = np.bincount(cls[cls >= 0], minlength=len(self.classes))
            for index in np.flatnonzero((counts == self.class_sizes) & (self.class_sizes > 1)):
                inside = cls == index  # the class is allowed whole: keep its hinted members and first
                keep &= ~inside | hint
                keep[int(np.argmax(inside))] = True
            if ok.size > 1:
                keep &= ~self.backslash[ok] | hint
            ok, hint = ok[keep], hint[keep]
            # Inside a string, letters and digits before punctuation: ``"a0"`` reads better than
            # ``"]]"`` and costs the same.
            hint = hint * 2 + self.alnum[ok]
        return ok[np.argsort(-hint.astype(np.int8), kind="stable")]

    def ordered(self, row: np.ndarray, state: Sequence[Any], limit: int,
                ok: np.ndarray | None = None) -> list[int]:
        """Indices of the allowed candidates, least nested result first, at most ``limit``."""
        if ok is None:
            ok = self.allowed(row)
        if ok.size == 0:
            return []
        if state[2]:  # mid-escape: rare, scan each allowed candidate
            after = np.array([nesting(scan(self.texts[i], tuple(state[:3]))) for i in ok])  # type: ignore[arg-type]
        else:
            after = self._after[bool(state[1])][ok] + int(state[0]) * 16
        return [int(i) for i in ok[np.argsort(after, kind="stable")[:limit]]]

    @classmethod
    def build(cls, texts: Iterable[tuple[int, str]], special: Iterable[tuple[int, str]] = ()) -> ClosingVocab:
        """From ``(id, decoded text)`` pairs; ``special`` ones (close tags) rank after closers."""
        ranked = []
        for tid, text in texts:
            key = _rank(text)
            if key is not None:
                ranked.append((key, tid, text))
        ranked += [((SPECIAL, i), int(t), text) for i, (t, text) in enumerate(special)]
        ranked.sort()
        seen: set[int] = set()
        keep = [(key[0], t, text) for key, t, text in ranked if not (t in seen or seen.add(t))]
        return cls([t for _, t, _ in keep], [text for _, _, text in keep], [k for k, _, _ in keep])


def closing_vocab_for(tokenizer: Tokenizer) -> ClosingVocab:
    """The candidate vocabulary of ``tokenizer`` (the afm_struct facade), built once per
    vocabulary (~0.3 s at 49k tokens, ~1.3 s at 200k) and kept in the tokenizer's derived parts;
    across processes, read back from the disk cache (models/disk_cache.py)."""
    return tokenizer.derived.part("closing_vocab", "closing_vocab", lambda: cached_closing_vocab(tokenizer),
                                  shared=True)


def cached_closing_vocab(tokenizer: Tokenizer) -> ClosingVocab:
    """:func:`build_closing_vocab`, through the disk cache keyed by the vocabulary's fingerprint
    (a vocabulary that cannot be fingerprinted is built every time).  What is stored are the
    candidates, their texts and kinds, from which :class:`ClosingVocab` derives the rest in
    milliseconds; building them is the HF decode of every short token."""
    import sys

    from ...models import disk_cache

    fingerprint = tokenizer.vocabulary_fingerprint()
    if not fingerprint:
        return build_closing_vocab(tokenizer)
    key = f"{fingerprint}:{disk_cache.code_digest(sys.modules[__name__])}"
    return disk_cache.load_or_build(
        "closing-vocab", key, lambda: build_closing_vocab(tokenizer),
        encode=lambda v: {"tokens": v.tokens.tolist(), "texts": v.texts, "kinds": v.kinds.tolist()},
        decode=_stored_vocab)


def _stored_vocab(stored: dict[str, Any]) -> ClosingVocab:
    tokens, texts, kinds = stored["tokens"], stored["texts"], stored["kinds"]
    if not (len(tokens) == len(texts) == len(kinds)) or not all(isinstance(t, str) for t in texts):
        raise ValueError("candidate lists of different lengths or kinds")
    return ClosingVocab([int(t) for t in tokens], texts, [int(k) for k in kinds])


def build_closing_vocab(tokenizer: Tokenizer) -> ClosingVocab:
    """Build the candidate vocabulary of ``tokenizer`` (use :func:`closing_vocab_for`)."""
    hf = tokenizer.hf
    eos = {int(i) for i in tokenizer.eos_token_ids}
    size = int(tokenizer.vocab_size)
    added = getattr(hf, "added_tokens_decoder", None) or {}
    special = sorted((int(i), str(tok.content)) for i, tok in added.items()
                     if int(i) < size and int(i) not in eos and getattr(tok, "special", False))
    skip = {i for i, _ in special} | eos
    # Only short tokens can be candidates (closers, minimal values, single characters).
    pieces = hf.convert_ids_to_tokens(list(range(size)))
    short = [i for i, p in enumerate(pieces) if p is not None and len(p) <= 6 and i not in skip]
    texts = zip(short, hf.batch_decode([[i] for i in short]), strict=True)
    return ClosingVocab.build(texts, special)
