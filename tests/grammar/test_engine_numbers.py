"""The number guard in front of llguidance (afm_struct/grammar/engines/llguidance_numbers.py).

Three parts: the guard finds what it must (paths, kinds) and nothing in ordinary schemas; the
compile path serves those schemas honestly (relaxed with ``number_beyond_engine``, a Lark
``%json`` block a 400, an integer range with no integer a 400); and, as a property over numbers
at the edges of int64 and float64, a constraint served ``exact`` never accepts a number its
schema rejects (the grammar walked token by token, the schema judged by jsonschema).
"""

from __future__ import annotations

import json
import math
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from afm_struct.errors import SchemaError
from afm_struct.grammar.compiler import ConstraintCompiler
from afm_struct.grammar.engines.llguidance_numbers import lark_json_issues, number_issues, widen
from afm_struct.grammar.spec import JsonSchemaRequest, LarkRequest, Mode, Rung

from .schema_strategies import EXAMPLES

I64_MIN = -(2**63)
CRASHING = [
    {"type": "integer", "minimum": I64_MIN, "maximum": I64_MIN},
    {"type": "integer", "minimum": I64_MIN + 1, "maximum": I64_MIN + 1},
    {"type": "integer", "minimum": -1e20, "maximum": -1e19},
    {"type": "integer", "minimum": -1e300, "maximum": -1e299},
    {"type": "integer", "minimum": -1e19, "exclusiveMaximum": I64_MIN + 1},
    {"type": "integer", "exclusiveMinimum": -1e20, "maximum": I64_MIN},
    {"const": I64_MIN},
    {"const": I64_MIN + 511},
    {"const": [I64_MIN]},
    {"enum": ["a", I64_MIN]},
    {"type": "number", "const": I64_MIN},
]


@pytest.mark.parametrize("schema", CRASHING, ids=lambda s: json.dumps(s)[:60])
def test_every_crashing_shape_is_found(schema: Any) -> None:
    issues = number_issues(schema)
    assert issues and any(i.kind == "crash" for i in issues)
    wider = widen(schema, issues)
    assert wider is not None and number_issues(wider) == []


@pytest.mark.parametrize("schema, where, kind", [
    ({"type": "integer", "minimum": 2**64, "maximum": 2**64 + 4}, "$.minimum", "inexact"),
    ({"type": "integer", "minimum": 2**53 + 1}, "$.minimum", "inexact"),
    ({"type": "integer", "exclusiveMinimum": 2**60}, "$.exclusiveMinimum", "inexact"),
    ({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1e-300}, "$.exclusiveMinimum", "inexact"),
    ({"type": "number", "exclusiveMinimum": 1, "exclusiveMaximum": 1.5}, "$.exclusiveMinimum", "inexact"),
    ({"type": "number", "exclusiveMinimum": -0.5, "exclusiveMaximum": 0}, "$.exclusiveMaximum", "inexact"),
    ({"type": "number", "minimum": 1.2345678901234567e18}, "$.minimum", "inexact"),
    ({"type": "number", "minimum": -1e300, "maximum": 1e300}, "$.maximum", "inexact"),
    ({"const": 2**53 + 1}, "$.const", "inexact"),
    ({"const": 1e300}, "$.const", "inexact"),
    # A property may be called "const" or "minimum": its schema is still walked as one.
    ({"properties": {"const": {"type": "integer", "minimum": -1e20, "maximum": -1e19}}},
     "$.properties.const.minimum", "crash"),
    ({"properties": {"minimum": {"enum": [I64_MIN]}}}, "$.properties.minimum.enum[0]", "crash"),
    ({"$defs": {"a": {"items": {"const": {"x": [2**70]}}}}}, '$["$defs"].a.items.const.x[0]', "inexact"),
])
def test_issues_name_the_keyword(schema: Any, where: str, kind: str) -> None:
    issues = number_issues(schema)
    assert (where, kind) in [(i.where, i.kind) for i in issues]
    wider = widen(schema, issues)
    assert wider is not None and number_issues(wider) == []


@pytest.mark.parametrize("schema", [
    {"type": "integer", "minimum": -10, "maximum": 10},
    # tighter in the engine (2^63-1), so sound: a dev-set schema's timestamp cap
    {"type": "integer", "minimum": 0, "maximum": 9223372036854776000},
    {"type": "integer", "minimum": -(2**53), "maximum": 2**53},
    {"type": "integer", "minimum": I64_MIN + 2048, "maximum": I64_MIN + 2048},
    {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
    {"type": "number", "exclusiveMinimum": 0.5, "exclusiveMaximum": 0.75},
    {"type": "number", "minimum": -1e15, "maximum": 1e15},
    {"const": 1e17}, {"enum": [2**53, -(2**53), 0.1]},
    # data that merely looks like a schema is not one (default, examples)
    {"type": "object", "default": {"minimum": I64_MIN, "maximum": I64_MIN}},
    {"type": "string", "description": "x" * 20 + "12345678901234567890"},
])
def test_numbers_the_engine_takes_are_left_alone(schema: Any) -> None:
    assert number_issues(schema) == []


def test_lark_json_blocks_are_read_where_they_sit() -> None:
    grammar = 'start: "a" x | y\nx: %json {"type": "integer"}\ny: %json{"const": -9223372036854775808}'
    found = lark_json_issues(grammar)
    assert [(block, issue.where, issue.kind) for block, issue in found] == [(1, "$.const", "crash")]
    assert lark_json_issues('start: "-9223372036854775808"') == []


SERVED_RELAXED = [
    *CRASHING[:6],
    {"type": "object", "properties": {"a": {"type": "integer", "minimum": -1e300, "maximum": -1e299},
                                      "b": {"type": "string"}}, "required": ["a", "b"]},
    {"oneOf": [{"type": "integer", "minimum": I64_MIN, "maximum": I64_MIN}, {"type": "string"}]},
    {"type": "integer", "minimum": 2**64, "maximum": 2**64 + 4},
    {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1e-300},
    # values the engine emitted changed: 18446744073709552000, 9007199254740992
    {"const": 2**64}, {"enum": [2**53 + 1, "a"]},
]


@pytest.mark.parametrize("schema", SERVED_RELAXED, ids=lambda s: json.dumps(s)[:60])
@pytest.mark.parametrize("strict", [True, False])
def test_the_compile_serves_them_relaxed_and_says_why(compiler: ConstraintCompiler, schema: Any,
                                                     strict: bool) -> None:
    compiled = compiler.compile(JsonSchemaRequest(schema, strict=strict))
    assert compiled.rung is Rung.RELAXED and compiled.mode is Mode.DOWNGRADED
    assert compiled.reason == "number_beyond_engine"
    assert compiled.flag_downgraded is strict


def test_a_lark_json_block_the_engine_crashes_on_is_a_400_naming_it(compiler: ConstraintCompiler) -> None:
    with pytest.raises(SchemaError) as info:
        compiler.compile(LarkRequest('start: "n=" n\nn: %json {"type": "integer", "minimum": -1e20, '
                                     '"maximum": -1e19}'))
    assert info.value.status == 400 and info.value.param == "grammar"
    assert "%json block #1" in info.value.message and "$.minimum" in info.value.message


def test_an_empty_integer_range_beyond_int64_is_a_400(compiler: ConstraintCompiler) -> None:
    with pytest.raises(SchemaError) as info:
        compiler.compile(JsonSchemaRequest({"type": "integer", "exclusiveMinimum": 2**64,
                                            "exclusiveMaximum": 2**64 + 1}))
    assert info.value.status == 400 and "no integer" in info.value.message


# ---------------------------------------------------------------- exact is exact (property)

_EDGE = [0, 1, 2**31, 2**53, 2**63, 2**64]
_STEP = [-1025, -513, -512, -2, -1, 0, 1, 2, 512, 1024]
EDGE_INTS = st.builds(lambda e, d, s: s * (e + d), st.sampled_from(_EDGE), st.sampled_from(_STEP),
                      st.sampled_from([1, -1]))
EDGE_FLOATS = st.sampled_from([0.0, -0.0, 0.5, 1.0, 1.5, -1.0, -0.5, 1e-300, 9.223372036854776e18,
                               -9.223372036854776e18, 1e19, -1e19, 1.2345678901234567e18, 2.0**53])
BOUND = st.one_of(EDGE_INTS, EDGE_FLOATS)


@st.composite
def numeric_schemas(draw: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": draw(st.sampled_from(["integer", "number"]))}
    for key in draw(st.lists(st.sampled_from(["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]),
                             min_size=1, max_size=2, unique=True)):
        schema[key] = draw(BOUND)
    return schema


def _candidates(schema: dict[str, Any]) -> list[str]:
    """Numbers around every bound, written as a model would."""
    out = {"0", "-0", "1", "-1", str(2**63 - 1), str(-(2**63)), "0.5"}
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if key in schema:
            v = schema[key]
            base = int(v) if isinstance(v, int) or (isinstance(v, float) and v.is_integer()) else None
            if base is not None:
                out.update(str(base + d) for d in (-1, 0, 1))
            out.update({json.dumps(v), repr(float(v)) if math.isfinite(float(v)) else "0"})
    return sorted(out)


def _accepts(compiled: Any, tokenizer: Any, text: str) -> bool:
    matcher = compiled.new_matcher()
    return all(matcher.advance(t) for t in tokenizer.encode(text)) and matcher.is_accepting()


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(schema=numeric_schemas())
def test_exact_never_accepts_a_number_the_schema_rejects(compiler: ConstraintCompiler, tokenizer: Any,
                                                          schema: dict[str, Any]) -> None:
    try:
        compiled = compiler.compile(JsonSchemaRequest(schema))
    except SchemaError:
        return  # an empty range: refused, nothing served
    if compiled.rung is not Rung.EXACT:
        return
    checker = jsonschema.Draft202012Validator(schema)
    for text in _candidates(schema):
        if _accepts(compiled, tokenizer, text):
            assert checker.is_valid(json.loads(text)), (schema, text)
