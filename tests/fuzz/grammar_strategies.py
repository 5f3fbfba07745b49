"""Hypothesis strategies for hostile constraints: JSON Schemas, Lark grammars and regexes.

Aimed at where a native grammar engine breaks: numbers at the edges of int64 and float64
(±2^63 and ±2^64 with their neighbours, ±2^53, ±1e308, the smallest subnormal, -0.0, huge and
tiny ``multipleOf``), lengths and counts beyond any buffer, deep nesting, long and odd Unicode
(astral characters, surrogate escapes, NUL, combining marks, right-to-left marks) and patterns
(classes, repetitions, anchors, look-arounds the engine refuses).  A case is ``(kind, text)``:
``kind`` one of ``json`` (a schema's JSON text), ``lark``, ``regex``.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

_EDGES = [2**63, 2**64, 2**53, 2**31, 2**32]
_STEPS = (-1025, -512, -1, 0, 1, 512, 1024)
EXTREME_INTS = st.one_of(
    st.sampled_from([s * (e + d) for e in _EDGES for d in _STEPS for s in (1, -1)]),
    st.integers(-(2**70), 2**70), st.integers(-10, 10))
EXTREME_FLOATS = st.one_of(
    st.sampled_from([1e308, -1e308, 1.7976931348623157e308, -1.7976931348623157e308, 5e-324, -5e-324,
                     1e-300, -1e-300, 1e-320, 0.0, -0.0, 0.1, 0.5, 1.5, -0.5, 1e19, -1e19, 1e20, -1e20,
                     9.223372036854776e18, -9.223372036854776e18, 1.2345678901234567e18, 1e300, -1e300]),
    st.floats(allow_nan=False, allow_infinity=False))
# The int64 edge itself, weighted: where llguidance 1.9.1 crashes (tests/fuzz/test_grammar_fuzz.py).
INT64_EDGE = st.sampled_from([-(2**63), -(2**63) + 1, -(2**63) + 512, -(2**63) - 1, -1e19, -1e20, -9.3e18,
                              2**63 - 1, 2**63, 2**64])
NUMBERS = st.one_of(EXTREME_INTS, EXTREME_FLOATS, INT64_EDGE)
COUNTS = st.one_of(st.integers(0, 5), st.sampled_from([2**31 - 1, 2**32, 2**53, 2**63 - 1, 2**64, 10**6]))
ODD_TEXT = st.one_of(
    st.text(max_size=8),
    st.sampled_from(["", "\x00", "\ud800", "\U0001f600" * 3, "e\u0301", "\u202e", "\ufeff", "a" * 300,
                     "\\", '"', "\u2028", "𝔘𝔫𝔦"]))
PATTERNS = st.sampled_from([
    "^a$", "^[a-z]{0,3}$", "^(?!a).*$", "(a|b)*c", "^\\d{1,20}$", "^[\\u0000-\\uffff]*$", "a{0,100000}",
    "^.{65536}$", "[^\\s\\S]", "^(a+)+$", "\\p{L}+", "^$", "(?=a)", "\\b", "[\\ud800-\\udfff]",
    "^\\$\\{[a-z]+\\}$", "a{2147483647}", "(?i)abc", "[z-a]", "(", "\\1", "^(a|ab)(c|bcd)(d*)$"])


def _number_schema(draw: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {}
    kind = draw(st.sampled_from(["integer", "number", ["integer", "null"], None]))
    if kind is not None:
        schema["type"] = kind
    for key in draw(st.lists(st.sampled_from(["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                              "multipleOf"]), max_size=3, unique=True)):
        value = draw(NUMBERS)
        if key == "multipleOf":
            value = abs(value) or 1
        schema[key] = value
    if draw(st.booleans()):  # a one-point range: the crashing shape
        schema["minimum"] = schema["maximum"] = draw(NUMBERS)
    return schema


def _value(depth: int) -> st.SearchStrategy[Any]:
    scalars = st.one_of(st.none(), st.booleans(), NUMBERS, ODD_TEXT)
    if depth <= 0:
        return scalars
    return st.one_of(scalars, st.lists(_value(depth - 1), max_size=3),
                     st.dictionaries(ODD_TEXT, _value(depth - 1), max_size=2))


@st.composite
def leaf_schemas(draw: Any) -> Any:
    """One leaf schema: numeric bounds, const/enum values, strings, counts."""
    choice = draw(st.integers(0, 5))
    if choice == 0:
        return _number_schema(draw)
    if choice == 1:
        return {"const": draw(_value(2))}
    if choice == 2:
        return {"enum": draw(st.lists(_value(1), min_size=1, max_size=4))}
    if choice == 3:
        out: dict[str, Any] = {"type": "string"}
        if draw(st.booleans()):
            out["pattern"] = draw(PATTERNS)
        if draw(st.booleans()):
            out["maxLength"] = draw(COUNTS)
        if draw(st.booleans()):
            out["minLength"] = draw(st.integers(0, 3))
        if draw(st.booleans()):
            out["format"] = draw(st.sampled_from(["date-time", "email", "uuid", "ipv6", "x-odd"]))
        return out
    if choice == 4:
        return {"type": "array", "maxItems": draw(COUNTS), "items": _number_schema(draw)}
    return draw(st.sampled_from([True, False, {}, {"type": "null"}, {"type": "boolean"}]))


def _wrap(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.builds(lambda props, req: {"type": "object", "properties": props,
                                      "required": [k for k in props if req]},
                  st.dictionaries(ODD_TEXT, children, min_size=1, max_size=3), st.booleans()),
        st.builds(lambda item: {"type": "array", "items": item}, children),
        st.builds(lambda parts: {"anyOf": parts}, st.lists(children, min_size=1, max_size=3)),
        st.builds(lambda parts: {"allOf": parts}, st.lists(children, min_size=1, max_size=2)),
        st.builds(lambda parts: {"oneOf": parts}, st.lists(children, min_size=1, max_size=2)),
        st.builds(lambda child: {"$defs": {"d": child}, "$ref": "#/$defs/d"}, children))


@st.composite
def deep_schemas(draw: Any) -> Any:
    """A leaf under a long chain of arrays/objects (depth up to 120)."""
    schema = draw(leaf_schemas())
    for _ in range(draw(st.integers(1, 120))):
        schema = {"type": "array", "items": schema} if draw(st.booleans()) else \
            {"type": "object", "properties": {"k": schema}, "required": ["k"]}
    return schema


SCHEMAS = st.one_of(st.recursive(leaf_schemas(), _wrap, max_leaves=6), deep_schemas())


@st.composite
def lark_grammars(draw: Any) -> str:
    """A Lark grammar: ``%json`` blocks of hostile schemas, odd terminals and repetitions."""
    lines = ["start: item+"]
    alternatives = []
    for i in range(draw(st.integers(1, 3))):
        choice = draw(st.integers(0, 3))
        if choice == 0:
            lines.append(f"r{i}: %json {json.dumps(draw(SCHEMAS))}")
        elif choice == 1:
            lines.append(f"r{i}: /{draw(PATTERNS).replace('/', '')}/")
        elif choice == 2:
            lines.append(f'r{i}: "a"{{{draw(COUNTS)}}}')
        else:
            lines.append(f"r{i}: {json.dumps(draw(ODD_TEXT) or 'x')}")
        alternatives.append(f"r{i}")
    lines.insert(1, "item: " + " | ".join(alternatives))
    return "\n".join(lines)


@st.composite
def cases(draw: Any) -> tuple[str, str]:
    """One constraint as ``(kind, text)``."""
    kind = draw(st.sampled_from(["json", "json", "json", "lark", "regex"]))
    if kind == "json":
        return kind, json.dumps(draw(SCHEMAS))
    if kind == "lark":
        return kind, draw(lark_grammars())
    return kind, draw(st.one_of(PATTERNS, st.builds(lambda n: f"a{{{n}}}", COUNTS), ODD_TEXT))
