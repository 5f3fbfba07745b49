"""The lexer budget, checked at compile time: no schema may force a longer run of text than the
grammar engine can follow.

llguidance's lexer works on derivatives of regular expressions.  Where the grammar forces text
(``"pattern": "^a{1000000}$"``, a long ``const`` or ``enum`` string, a long property name), each
step's mask and forced tokens follow the whole forced run: the work per step grows with its
length, and past roughly 150,000 characters one derivative exhausts the lexer's fuel in the
middle of the output (``LexerTooComplex``), so the request fails after it started.  Measured on
the embedded tokenizer: ``a{10000}`` costs up to 8 ms a step, ``a{50000}`` 44 ms,
``a{200000}`` and ``(ab){500000}`` fail at the opening quote, ``x(a{50000}|b)`` after three
tokens.  A run is a stretch where exactly one character may come next: ``[a-z]{1,300000}`` or
``.{0,300000}`` force nothing and cost microseconds, whatever their bound.

So every forced run is measured here, statically, before any engine sees the schema: the
longest run a ``pattern`` (or a ``patternProperties`` name) can force, and the JSON text of
each ``const`` / ``enum`` value and property name.  One over :data:`MAX_FORCED_RUN` makes the
compile a :class:`~afm_struct.errors.GrammarLimitError` (400, with ``param`` at that part of the
schema) for a strict request, and a downgrade for a non-strict one (the compiler's business).
outlines-core builds its whole automaton at compile time instead (bounded by its worker's time
and memory), but the same schemas are refused the same way whatever the engine.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import interegular
from interegular import patterns as _p

from ...errors import GrammarLimitError
from ..schema.paths import json_path

# The longest forced run (in bytes of JSON text) a schema may ask for: far above any real
# pattern or constant, and a step's lexer work stays within ~8 ms on a laptop CPU.
MAX_FORCED_RUN = 10_000
REASON = "forced_run_too_long"
SIZE_REASON = "pattern_too_long"

# The longest regex (``pattern``, a ``patternProperties`` name, a regex request) read at all: the
# static checks and rewrites here are pure Python, and a 180,000-character alternation costs
# seconds of CPU holding the GIL every running stream needs (the dev set's longest is 5,153).
MAX_PATTERN_CHARS = 16_384

# Names whose values are instances (not schemas): nothing in them is compiled.
_INSTANCES = ("enum", "const", "default", "examples")
_NAMED = ("$defs", "definitions", "dependentSchemas")
_UNICODE_CLASS = re.compile(r"\\[pP]\{[^}]*\}|\\[pP][A-Za-z]")
_QUANTIFIER = re.compile(r"\{(\d+)(,\d*)?\}")


@dataclass(frozen=True)
class ForcedRun:
    """A part of a schema that forces ``length`` bytes of text in a row."""

    path: tuple[str | int, ...]  # where, in the schema
    length: int
    what: str  # "pattern", "const value", "enum value", "property name"
    # True: the pattern's own text is over MAX_PATTERN_CHARS (its run was not measured).
    oversized: bool = False

    @property
    def reason(self) -> str:
        """The downgrade reason a non-strict request is served with."""
        return SIZE_REASON if self.oversized else REASON

    def error(self, param: str, prefix: str = "$") -> GrammarLimitError:
        """The 400 for a strict request; ``param`` is where the schema sits in the request,
        ``prefix`` the same place as a JSON path (``$.tools[0].function.parameters``).

        The error's ``param`` is the request path of the part; a long property name (itself
        the forced run) is named by the object that holds it, shortened in the message.
        """
        shown = tuple(_short(p) for p in self.path)
        parts = [str(p) for p in self.path]
        if shown != self.path:
            parts = [str(p) for p in self.path[:next(i for i, p in enumerate(shown) if p != self.path[i])]]
        if self.oversized:
            return GrammarLimitError(
                f"the {self.what} at {prefix}{json_path(shown)[1:]} is {self.length:,} characters "
                f"long; constrained output takes regular expressions of at most "
                f"{MAX_PATTERN_CHARS:,} (a longer one costs seconds of compile work shared with "
                "every running request): shorten it, or list long alternatives as an enum",
                param=".".join(p for p in (param, *parts) if p) or None)
        return GrammarLimitError(
            f"the {self.what} at {prefix}{json_path(shown)[1:]} forces {self.length:,} characters in a row; "
            f"constrained output allows at most {MAX_FORCED_RUN:,} (a longer run exhausts the "
            "grammar engine's lexer budget in the middle of the output): shorten it, or bound "
            "the string with maxLength instead of a repeated character",
            param=".".join(p for p in (param, *parts) if p) or None)


def _short(part: str | int) -> str | int:
    return part if isinstance(part, int) or len(part) <= 40 else part[:37] + "..."


def _width(ch: str) -> int:
    """Bytes of ``ch`` in JSON text (escapes included)."""
    return len(json.dumps(ch, ensure_ascii=False).encode()) - 2


@dataclass(frozen=True)
class _Run:
    """Forced text of a regex node: ``fixed`` when it matches one string only (then ``pre`` is
    its length); ``pre``/``suf`` the forced bytes at its start / after its last choice; ``best``
    the longest forced run inside."""

    fixed: bool
    pre: int
    suf: int
    best: int


_CHOICE = _Run(False, 0, 0, 0)


def _analyse(node: Any) -> _Run:
    if isinstance(node, _p._CharGroup):
        if not node.negated and len(node.chars) == 1:
            n = _width(next(iter(node.chars)))
            return _Run(True, n, n, n)
        return _CHOICE
    if isinstance(node, _p._Concatenation):
        return _sequence([_analyse(part) for part in node.parts])
    if isinstance(node, _p.Pattern):
        runs = [_analyse(option) for option in node.options]
        if len(runs) == 1:
            return runs[0]
        # Alternatives share at most their shortest forced start; once one is taken, its own
        # forced text follows.
        return _Run(False, min(r.pre for r in runs), max(r.suf for r in runs), max(r.best for r in runs))
    if isinstance(node, _p._Repeated):
        return _repeat(_analyse(node.base), node.min, node.max)
    return _CHOICE  # lookarounds (refused elsewhere), empty classes: no forced text


def _sequence(runs: Sequence[_Run]) -> _Run:
    run = best = 0
    pre: int | None = None
    for r in runs:
        if r.fixed:
            run += r.pre
            continue
        best = max(best, run + r.pre, r.best)
        if pre is None:
            pre = run + r.pre
        run = r.suf
    best = max(best, run)
    if pre is None:
        return _Run(True, run, run, run)
    return _Run(False, pre, run, best)


def _repeat(r: _Run, low: int, high: int | None) -> _Run:
    if high == 0:
        return _Run(True, 0, 0, 0)
    if r.fixed:
        if high == low:
            n = low * r.pre
            return _Run(True, n, n, n)
        # The first ``low`` copies are forced, then each further copy is a choice.
        return _Run(False, low * r.pre, r.pre, max(low * r.pre, r.pre))
    again = high is None or high >= 2  # a copy's end runs into the next copy's start
    return _Run(False, r.pre if low >= 1 else 0, r.suf, max(r.best, r.suf + r.pre if again else 0))


# A repeat as the engine's regex syntax (Rust's) also reads it: spaces inside the braces.
_SPACED_REPEAT = re.compile(r"\{\s*(\d+)\s*(?:(,)\s*(\d*)\s*)?\}")


def _compact_repeats(pattern: str) -> str:
    """``pattern`` with each spaced repeat (``a{ 3}``, ``a{3, 5}``) written without spaces: the
    engine reads those as repeats where Python reads text (see json_escapes.py)."""
    return _SPACED_REPEAT.sub(lambda m: "{" + m.group(1) + (m.group(2) or "") + (m.group(3) or "") + "}",
                              pattern)


def forced_run(pattern: str, *, engine_syntax: bool = False) -> int:
    """The longest run of bytes ``pattern`` can force (an upper bound).

    Syntax interegular does not parse (Unicode classes, anchors inside the pattern) is retried
    with those parts read as "any character"; failing that, the largest repeat count (the copies it
    forces) stands in for the run.
    """
    return regex_run(pattern, engine_syntax=engine_syntax).best


def regex_run(pattern: str, *, engine_syntax: bool = False) -> _Run:
    """The forced text of ``pattern`` (see :func:`forced_run`), as the run algebra's value (a
    grammar's regex terminals join the runs around them).  ``engine_syntax``: the pattern goes
    to the engine as it is (a regex request, a Lark terminal or ``%json`` schema), read with the
    engine's rules; otherwise as Python's ``re`` reads it (JSON Schema patterns, which
    json_escapes.guard_pattern rewrites so that the engine reads them the same way)."""
    if engine_syntax:
        pattern = _compact_repeats(pattern)
    body = pattern[1:] if pattern.startswith("^") else pattern
    if body.endswith("$") and not body.endswith("\\$"):
        body = body[:-1]
    for attempt in (body, _UNICODE_CLASS.sub(".", body)):
        try:
            return _analyse(interegular.parse_pattern(attempt))
        except RecursionError:
            break
        except Exception:  # interegular rejects syntax the engines take: try it plainer
            continue
    n = max((int(low) for low, _ in _QUANTIFIER.findall(pattern)), default=0)
    return _Run(False, n, n, n)


def check_forced_runs(schema: Any, *, param: str, prefix: str = "$", engine_syntax: bool = False) -> None:
    """Raise :class:`GrammarLimitError` (with ``param`` + the path) when ``schema`` forces a run
    over :data:`MAX_FORCED_RUN`; ``param`` / ``prefix`` say where the schema sits in the request
    (``engine_syntax``: see :func:`regex_run`)."""
    run = longest_forced_run(schema, engine_syntax=engine_syntax)
    if run is not None:
        raise run.error(param, prefix)


def _pattern_run(path: tuple[str | int, ...], pattern: str, engine_syntax: bool) -> ForcedRun:
    """The pattern at ``path``, measured, or marked oversized without reading it."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return ForcedRun(path, len(pattern), "pattern", oversized=True)
    return ForcedRun(path, forced_run(pattern, engine_syntax=engine_syntax), "pattern")


# A counted repeat's opening in JSON text: a brace then a digit or a comma occurs only inside
# a string (JSON's own braces are followed by a quote, a brace or a space).
_COUNTED_REPEAT = re.compile(r"\{[\d,]")


def bounded_by_text(text: str) -> bool:
    """True when the schema serialized as ``text`` (``json.dumps``, ASCII) forces no run over
    :data:`MAX_FORCED_RUN`, read from the text alone.

    A literal (``const``, ``enum`` value, property name) forces its JSON bytes, at most twice
    its length in ``text``: ``ensure_ascii`` writes each non-ASCII character as 6-12
    characters (at most 4 bytes of UTF-8), and the output's separators (``", "``, ``": "``)
    gain a space each over the text's.  A pattern with no counted repeat forces each of its atoms at
    most once (``+`` forces one copy, ``*`` and ``?`` none), each atom at most 1.2 bytes per
    character of its text (``\\x01``: 5 characters in ``text``, 6 bytes of JSON output); so a
    text of at most half the limit bounds them all.  The patterns are then far under
    :data:`MAX_PATTERN_CHARS` too.
    """
    return 2 * len(text) <= MAX_FORCED_RUN and _COUNTED_REPEAT.search(text) is None


def _literal(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode())


def longest_forced_run(schema: Any, text: str | None = None, *,
                       engine_syntax: bool = False) -> ForcedRun | None:
    """The first part of ``schema`` whose forced run exceeds :data:`MAX_FORCED_RUN`, or None.

    ``text``: ``schema`` as ``json.dumps`` writes it (ASCII), when the caller has it: a schema
    under half the limit with no counted repeat (``{n}``, ``{m,n}``, ``{,n}``) anywhere is
    under the limit without a walk (:func:`bounded_by_text`).  ``engine_syntax``: see
    :func:`regex_run`.
    """
    if text is not None and not engine_syntax and bounded_by_text(text):
        return None
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(schema, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, list):
            stack.extend((v, (*path, i)) for i, v in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        for key, value in node.items():
            here = (*path, key)
            found: ForcedRun | None = None
            if key == "pattern" and isinstance(value, str):
                found = _pattern_run(here, value, engine_syntax)
            elif key == "const":
                found = ForcedRun(here, _literal(value), "const value")
            elif key == "enum" and isinstance(value, list):
                found = max((ForcedRun((*here, i), _literal(v), "enum value") for i, v in enumerate(value)),
                            key=lambda f: f.length, default=None)
            if found is not None and (found.oversized or found.length > MAX_FORCED_RUN):
                return found
            if key in ("properties", "patternProperties") and isinstance(value, dict):
                for name, sub in value.items():
                    if key == "patternProperties":
                        named = _pattern_run((*here, name), name, engine_syntax)
                    else:
                        named = ForcedRun((*here, name), _literal(name), "property name")
                    if named.oversized or named.length > MAX_FORCED_RUN:
                        return named
                    stack.append((sub, (*here, name)))
            elif key in _NAMED and isinstance(value, dict):
                stack.extend((sub, (*here, name)) for name, sub in value.items())
            elif key not in _INSTANCES:
                stack.append((value, here))
    return None
