"""Numbers llguidance cannot take: found in a schema before the engine reads it.

llguidance 1.9.1 reads every JSON number of a schema as an ``f64``, and an integer schema's
bounds then as an ``i64`` (``ceil``/``floor``, ``±1.0`` for exclusive bounds, a saturating
cast).  Two things follow, both measured (tests/grammar/test_engine_numbers.py, the grammar
fuzzer in tests/fuzz/grammar_fuzz.py):

* **crash**: an integer bound or integer ``const``/``enum`` value that the engine turns into
  ``i64::MIN`` (-2^63, or anything a float rounds or saturates to it: ``-1e19``, ``-1e300``,
  ``-9223372036854775807``) sends its integer-range regex generator into endless recursion
  (negating ``i64::MIN`` is ``i64::MIN``): SIGSEGV, the whole process gone.  Alone such a bound
  is refused with an error; paired with an upper bound there (or as a ``const``) it crashes.
* **inexact**: a bound or value the engine changes, so that its grammar takes numbers the
  schema rejects (``minimum: 2^64`` saturates to 2^63-1, which it then emits; ``const:
  2^53+1`` emits 2^53; an exclusive integer bound beyond 2^53 loses its ``+1``; a float bound
  such as ``1.2345678901234567e18`` is written with the shortest digits, not its value).  An
  integer bound the engine makes tighter is left alone: it only narrows what is emitted.  And
  one engine bug at ordinary sizes: an exclusive bound at an integer ``k`` with the other bound
  within ``k``'s unit interval lets ``k`` itself through (``exclusiveMinimum: 0,
  exclusiveMaximum: 0.5`` takes ``0``; mirrored, ``-0``).

:func:`number_issues` finds both in one walk, after a text test (on the dev set 46 of 3,320
schemas have a 16-digit number, an ``e+`` or an exclusive bound; the test costs the others
~10 µs).  The exact rung refuses such a schema (the ladder then serves it relaxed,
``reason: number_beyond_engine``); the relaxed rung compiles :func:`widen`'s copy, without the
keywords at fault (validation afterwards judges by the original); a Lark grammar's ``%json``
block with one is a 400 naming it.  Nothing here calls the engine.
"""

from __future__ import annotations

import copy
import json
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

from ..schema.paths import json_path

I64_MIN = -(2**63)
I64_MAX = 2**63 - 1
_EXACT_INTS = 2**53  # every integer up to this magnitude is a float exactly
# Every digit read as 0: a run of 16 zeros then marks a number of 16+ digits (see _suspect).
_DIGITS_AS_ZERO = str.maketrans("123456789", "000000000")
_SIXTEEN = "0" * 16
_LARK_JSON = re.compile(r"%json\s*")
# Keywords whose value maps names to subschemas (a property may be called "const").
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
_DATA = frozenset({"const", "enum"})
_IGNORED = frozenset({"default", "examples"})  # annotations the engine does not compile
_LOWER = ("minimum", "exclusiveMinimum")
_UPPER = ("maximum", "exclusiveMaximum")


@dataclass(frozen=True)
class NumberIssue:
    """A keyword whose number the engine cannot take: ``crash`` or ``inexact``."""

    path: tuple[Any, ...]  # the keyword's path in the schema (its last part is the keyword)
    kind: str
    detail: str

    @property
    def where(self) -> str:
        """The keyword's JSON path (``$.properties.age.minimum``)."""
        return json_path(self.path)

    def message(self) -> str:
        """One sentence naming the keyword and what the engine would do with it."""
        return f"{self.where}: {self.detail}"


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _as_float(value: int | float) -> float | None:
    """The engine's ``f64`` of ``value`` (None where the value is beyond any float)."""
    try:
        return float(value)
    except OverflowError:
        return None


def _saturate(value: float) -> int:
    """Rust's ``f64 as i64``."""
    if math.isnan(value):
        return 0
    if value >= 2.0**63:
        return I64_MAX
    if value <= -(2.0**63):
        return I64_MIN
    return int(value)


def _engine_int_bound(value: int | float, exclusive: bool, lower: bool) -> int:
    """The ``i64`` bound llguidance's integer schema makes of ``value``."""
    f = _as_float(value)
    if f is None:
        return I64_MAX if value > 0 else I64_MIN
    if math.isinf(f):
        return _saturate(f)
    if exclusive:
        if f != math.floor(f):
            f = float(math.ceil(f) if lower else math.floor(f))
        else:
            f = f + 1.0 if lower else f - 1.0
    else:
        f = float(math.ceil(f) if lower else math.floor(f))
    return _saturate(f)


def _true_int_bound(value: int | float, exclusive: bool, lower: bool) -> int:
    """The integer bound ``value`` really sets (exact arithmetic)."""
    exact = Fraction(value)
    if lower:
        return math.floor(exact) + 1 if exclusive else math.ceil(exact)
    return math.ceil(exact) - 1 if exclusive else math.floor(exact)


def _types(node: dict[str, Any]) -> tuple[bool, bool]:
    """(may be an integer, may be a non-integer number) by ``type``; no ``type``: both (an
    ``allOf`` or ``$ref`` elsewhere may make it either)."""
    t = node.get("type")
    if isinstance(t, str):
        t = [t]
    if not isinstance(t, list):
        return True, True
    return "integer" in t, "number" in t


def _shortest_is_exact(value: float) -> bool:
    """True when the shortest digits of ``value`` (how the engine writes it) are its value."""
    return Decimal(repr(value)) == Decimal(value)


def _int_is_exact(value: int) -> bool:
    """True when the engine keeps the integer ``value`` (read as a float, written with its
    shortest digits: beyond 2^53 both can change it; conservative within int64, which the
    engine may keep whole)."""
    f = _as_float(value)
    if f is None or f != value:
        return False
    return abs(value) < _EXACT_INTS or _shortest_is_exact(f)


def _bound_issues(node: dict[str, Any], path: tuple[Any, ...]) -> list[NumberIssue]:
    integer, number = _types(node)
    out: list[NumberIssue] = []
    for key in (*_LOWER, *_UPPER):
        value = node.get(key)
        if not _number(value) or (isinstance(value, float) and not math.isfinite(value)):
            continue
        lower, exclusive = key in _LOWER, key.startswith("exclusive")
        where = (*path, key)
        f = _as_float(value)
        if integer:
            engine = _engine_int_bound(value, exclusive, lower)
            if engine == I64_MIN:
                out.append(NumberIssue(where, "crash", f"{key} {value} is -2^63 or beyond to the grammar "
                                       "engine, whose integer ranges fail there"))
                continue
            true = _true_int_bound(value, exclusive, lower)
            # A bound the engine makes tighter only narrows what it emits (a dev-set schema
            # caps a timestamp at 9223372036854776000, the engine at 2^63-1): still sound.
            if engine < true if lower else engine > true:
                out.append(NumberIssue(where, "inexact", f"{key} {value} is beyond the integers the grammar "
                                       "engine represents exactly (64-bit, and 2^53 for exclusive bounds)"))
                continue
        if number:
            if f is None or (isinstance(value, int) and not _int_is_exact(value)):
                out.append(NumberIssue(where, "inexact", f"{key} {value} is not a 64-bit float; the grammar "
                                       "engine would round it"))
            elif f.is_integer() and abs(f) >= _EXACT_INTS and not _shortest_is_exact(f):
                out.append(NumberIssue(where, "inexact", f"{key} {value} is written with fewer digits than "
                                       "its value by the grammar engine"))
    if number:
        bug = _exclusive_bug(node)
        if bug is not None:
            out.append(NumberIssue((*path, bug), "inexact", f"the grammar engine lets the {bug} value itself "
                                   "through when the other bound is within one unit of it"))
    return out


def _tighter(node: dict[str, Any], keys: tuple[str, str], lower: bool) -> tuple[float | None, bool]:
    """The bound llguidance keeps of (inclusive, exclusive) and whether it is exclusive."""
    inclusive, exclusive = (node.get(k) for k in keys)
    inclusive = float(inclusive) if _number(inclusive) and _as_float(inclusive) is not None else None
    exclusive = float(exclusive) if _number(exclusive) and _as_float(exclusive) is not None else None
    if exclusive is None:
        return inclusive, False
    if inclusive is None:
        return exclusive, True
    if lower:
        return (exclusive, True) if exclusive >= inclusive else (inclusive, False)
    return (exclusive, True) if exclusive <= inclusive else (inclusive, False)


def _exclusive_bug(node: dict[str, Any]) -> str | None:
    """The exclusive keyword the engine's float range lets through at its own value, if any:
    ``[k, r)`` with ``k`` an integer, ``k`` excluded and ``r < k + 1`` (``k >= 0``), or its
    mirror below zero (llguidance writes ``k(\\.digits)?`` there, the fraction optional)."""
    lo, lo_x = _tighter(node, _LOWER, True)
    hi, hi_x = _tighter(node, _UPPER, False)
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)) or lo >= hi:
        return None
    if lo >= 0 and lo_x and lo.is_integer() and hi < lo + 1:
        return "exclusiveMinimum"
    if hi <= 0 and hi_x and hi.is_integer() and lo > hi - 1:
        return "exclusiveMaximum"
    return None


def _value_issues(value: Any, path: tuple[Any, ...]) -> list[NumberIssue]:
    """Integers inside a ``const``/``enum`` value the engine crashes on or changes."""
    out: list[NumberIssue] = []
    stack: list[tuple[Any, tuple[Any, ...]]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, dict):
            stack.extend((v, (*where, k)) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((v, (*where, i)) for i, v in enumerate(item))
        elif isinstance(item, int) and not isinstance(item, bool):
            f = _as_float(item)
            if f == -(2.0**63):
                out.append(NumberIssue(where, "crash", f"the integer {item} is -2^63 to the grammar engine, "
                                       "whose integer ranges fail there"))
            elif not _int_is_exact(item):
                out.append(NumberIssue(where, "inexact", f"the integer {item} is beyond what the grammar "
                                       "engine writes exactly (2^53); it would emit another number"))
        elif isinstance(item, float) and math.isfinite(item) and item.is_integer() \
                and abs(item) >= _EXACT_INTS and not _shortest_is_exact(item):
            out.append(NumberIssue(where, "inexact", f"the number {item!r} is written with fewer digits than "
                                   "its value by the grammar engine"))
    return out


def _suspect(text: str) -> bool:
    """False when ``text`` (Python's JSON of a schema) cannot hold a number the engine changes or
    crashes on: those have 16+ digits (2^53 has 16) or, as Python writes floats from 1e16 up,
    an exponent ``e+``; the engine's bug needs an exclusive bound.  ~10 µs for the dev set's
    mean 4 kB schema (a regex for the same took 80-400 µs: it tries every position)."""
    return "e+" in text or '"exclusiveM' in text or _SIXTEEN in text.translate(_DIGITS_AS_ZERO)


def number_issues(schema: Any, text: str | None = None) -> list[NumberIssue]:
    """Every keyword of ``schema`` whose number the engine crashes on or changes; ``text``:
    ``schema`` as Python's ``json.dumps`` wrote it (any separators), when the caller has it."""
    if text is None:
        try:
            text = json.dumps(schema)
        except (TypeError, ValueError):
            return []
    if not _suspect(text):
        return []
    out: list[NumberIssue] = []
    # (node, path, is_schema): iterative, so a deep schema cannot overflow the stack.
    stack: list[tuple[Any, tuple[Any, ...], bool]] = [(schema, (), True)]
    while stack:
        node, path, is_schema = stack.pop()
        if isinstance(node, list):
            stack.extend((v, (*path, i), is_schema) for i, v in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        if is_schema:
            out.extend(_bound_issues(node, path))
        for key, value in node.items():
            if is_schema and key in _DATA:
                out.extend(_value_issues(value, (*path, key)))
            elif is_schema and key in _IGNORED:
                continue
            elif is_schema and key in _SCHEMA_MAPS and isinstance(value, dict):
                stack.extend((v, (*path, key, name), True) for name, v in value.items())
            else:
                stack.append((value, (*path, key), True))
    return out


def widen(schema: Any, issues: list[NumberIssue]) -> Any | None:
    """A copy of ``schema`` without the keywords at fault (a wider schema: the relaxed rung's;
    the output is then validated against the original), or None where some keyword at fault
    could not be removed.  Repeated until nothing is left: dropping the tighter of two bounds
    can bring the other one into play."""
    for _ in range(64):
        schema = _drop(schema, issues)
        issues = number_issues(schema)
        if not issues:
            return schema
    return None


def _drop(schema: Any, issues: list[NumberIssue]) -> Any:
    out = copy.deepcopy(schema)
    for issue in issues:
        at = _keyword_index(issue.path)
        if at is None:
            continue
        parent: Any = out
        for part in issue.path[:at]:
            try:
                parent = parent[part]
            except (KeyError, IndexError, TypeError):
                parent = None
                break
        if isinstance(parent, dict):
            parent.pop(issue.path[at], None)
    return out


def _keyword_index(path: tuple[Any, ...]) -> int | None:
    """Where in ``path`` the keyword to drop is: the ``const``/``enum`` holding the value, or
    the bound keyword itself (read as :func:`number_issues` walks: a name under ``properties``
    is a name, not a keyword)."""
    in_map = False
    for i, part in enumerate(path):
        if in_map:
            in_map = False
            continue
        if part in _DATA:
            return i
        if part in _SCHEMA_MAPS:
            in_map = True
        elif i == len(path) - 1 and part in (*_LOWER, *_UPPER):
            return i
    return None


def lark_json_issues(grammar: str) -> list[tuple[int, NumberIssue]]:
    """The issues of each ``%json {...}`` block of a Lark grammar, with the block's index."""
    if "%json" not in grammar:
        return []
    decoder = json.JSONDecoder()
    out: list[tuple[int, NumberIssue]] = []
    for index, match in enumerate(_LARK_JSON.finditer(grammar)):
        try:
            schema, _end = decoder.raw_decode(grammar, match.end())
        except ValueError:
            continue  # not JSON: the engine's own error says what is wrong
        out.extend((index, issue) for issue in number_issues(schema))
    return out
