"""The lexer budget at compile time (grammar/closer/literal_budget.py): forced runs are measured, and a
schema forcing more than the engine can follow is refused (strict) or served without it.

The budget is checked against llguidance itself: patterns of every shape under it compile
exactly and the engine follows an instance without error; over it they are refused before any
engine sees them, where the engine (asked anyway) stops with LexerTooComplex in mid-output.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from afm_struct.errors import GrammarLimitError
from afm_struct.grammar.closer.literal_budget import (
    MAX_FORCED_RUN,
    MAX_PATTERN_CHARS,
    forced_run,
    longest_forced_run,
)
from afm_struct.grammar.compiler import ConstraintCompiler
from afm_struct.grammar.engines.protocol import allocate_bitmask
from afm_struct.grammar.spec import CompileOptions, JsonSchemaRequest, Mode, RegexRequest, Rung

from ..decoding.randomized import examples
from .conftest import DATA, SHARED

A_MILLION = "^a{1000000}$"


@pytest.mark.parametrize(("pattern", "run"), [
    (A_MILLION, 1_000_000), ("^(ab){500000}$", 1_000_000), ("x(a{50000}|b)", 50_000),
    ("[a-z]{3}-a{300000}", 300_001), ("^a{300000,}$", 300_000), ("(a{100}){500}", 50_000),
    ('"{6000}', 12_000),  # a quote is two bytes of JSON text
    ("^[a-z]{1,300000}$", 0), (".{0,300000}", 0), ("^[0-9a-f]{64}$", 0), ("(abc|abd){100000}", 6),
    ("(x{1000}|y{1000}){300}", 2_000), ("(ab)+c{5}", 7), (r"^\d{3}-\d{4}$", 1),
    (r"^\p{L}{3}a{20000}$", 20_000),  # Rust syntax interegular does not parse
])
def test_forced_run_of_a_pattern(pattern: str, run: int) -> None:
    assert forced_run(pattern) == run


def test_forced_literals_are_found_where_they_are_compiled() -> None:
    long = "a" * (MAX_FORCED_RUN + 1)
    cases = {
        ("properties", "v", "pattern"): {"properties": {"v": {"type": "string", "pattern": A_MILLION}}},
        ("enum", 1): {"enum": ["b", long]},
        ("anyOf", 1, "items", "const"): {"anyOf": [{"const": "x"}, {"items": {"const": long}}]},
        ("properties", long): {"properties": {long: {"type": "integer"}}},
        ("patternProperties", A_MILLION): {"patternProperties": {A_MILLION: {}}},
        ("$defs", "big", "pattern"): {"$defs": {"big": {"pattern": A_MILLION}}},
    }
    for path, schema in cases.items():
        found = longest_forced_run(schema)
        assert found is not None and found.path == path, (path, found)
    # A long name is the object holding it in param (a path that resolves), shortened in words.
    err = longest_forced_run(cases[("properties", long)]).error("tools.0.function.parameters")
    assert err.param == "tools.0.function.parameters.properties" and long not in err.message
    # Values that are never compiled do not count.
    assert longest_forced_run({"type": "string", "default": long, "examples": [long]}) is None
    assert longest_forced_run({"type": "string", "maxLength": 10**6}) is None


def test_strict_is_a_400_at_the_schema_path_and_non_strict_a_downgrade(tokenizer) -> None:
    compiler = ConstraintCompiler(tokenizer)
    schema = {"type": "object", "properties": {"v": {"type": "string", "pattern": A_MILLION}},
              "required": ["v"]}
    with pytest.raises(GrammarLimitError) as info:
        compiler.compile(JsonSchemaRequest(schema, strict=True))
    err = info.value
    assert (err.status, err.code) == (400, "grammar_too_complex")
    assert err.param == "response_format.json_schema.schema.properties.v.pattern"
    assert "1,000,000" in err.message and "$.properties.v.pattern" in err.message
    loose = compiler.compile(JsonSchemaRequest(schema, strict=False))
    assert (loose.mode, loose.rung, loose.reason) == (Mode.DOWNGRADED, Rung.GENERIC_JSON,
                                                      "forced_run_too_long")
    with pytest.raises(GrammarLimitError) as info:
        compiler.compile(RegexRequest("^(ab){500000}$"))
    assert info.value.param == "pattern"
    # An invalid schema is told as such, not as a budget problem.
    with pytest.raises(Exception) as info:
        compiler.compile(JsonSchemaRequest({"type": 5, "pattern": A_MILLION}))
    assert getattr(info.value, "code", None) == "invalid_schema"


def test_the_outlines_engine_refuses_the_same_schemas(tokenizer) -> None:
    compiler = ConstraintCompiler(tokenizer, CompileOptions(backend="outlines", timeout_s=5))
    try:
        with pytest.raises(GrammarLimitError):
            compiler.compile(JsonSchemaRequest({"type": "string", "pattern": A_MILLION}))
    finally:
        compiler.close()


def _walk(matcher, tokenizer, text: str, steps: int) -> str | None:  # type: ignore[no-untyped-def]
    """Follow ``text`` token by token as decoding does (mask, then advance); the engine's error."""
    row = allocate_bitmask(1, tokenizer.vocab_size)[0]
    for token in tokenizer.encode(text)[:steps]:
        row[:] = 0
        matcher.fill_mask(row)
        if matcher.error() is not None or not matcher.advance(token):
            return matcher.error() or "rejected"
    return None


SHAPES = {  # pattern for n, and an instance of it
    "repeat": (lambda n: f"^a{{{n}}}$", lambda n: "a" * n),
    "pair": (lambda n: f"^(ab){{{n // 2}}}$", lambda n: "ab" * (n // 2)),
    "after_choice": (lambda n: f"^x(a{{{n}}}|b)$", lambda n: "x" + "a" * n),
    "nested": (lambda n: f"^(a{{100}}){{{max(n // 100, 1)}}}$", lambda n: "a" * (100 * max(n // 100, 1))),
    "class": (lambda n: f"^[ab]{{{n}}}$", lambda n: "ab" * (n // 2) + "a" * (n % 2)),
}


@settings(max_examples=examples(12), deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(shape=st.sampled_from(sorted(SHAPES)), n=st.sampled_from([50, 2_000, 9_000, 20_000, 250_000]))
def test_the_budget_keeps_out_what_the_engine_cannot_follow(tokenizer, shape: str, n: int) -> None:
    make, instance = SHAPES[shape]
    pattern = make(n)
    compiler = ConstraintCompiler(tokenizer)
    request = JsonSchemaRequest({"type": "string", "pattern": pattern}, strict=True)
    text = json.dumps(instance(n))
    if forced_run(pattern) <= MAX_FORCED_RUN:
        compiled = compiler.compile(request)
        assert compiled.rung is Rung.EXACT
        assert _walk(compiled.new_matcher(), tokenizer, text, 40) is None
    else:
        with pytest.raises(GrammarLimitError):
            compiler.compile(request)
    if n == 250_000 and shape in ("repeat", "pair"):
        # What the check keeps out: the engine, given the grammar anyway, stops mid-output.
        grammar = compiler.llguidance.compile_json_schema({"type": "string", "pattern": pattern})
        matcher = grammar.new_matcher()
        assert _walk(matcher, tokenizer, text, 40) is not None
        assert matcher.over_limits()


def test_no_dev_schema_is_over_the_budget() -> None:
    files = sorted(DATA.glob("*.json")) + (sorted(SHARED.glob("*.json")) if SHARED.is_dir() else [])
    over = []
    for path in files:
        data = json.loads(path.read_text())
        schema = data.get("schema", data) if isinstance(data, dict) else data
        if longest_forced_run(schema) is not None:
            over.append(path.name)
    assert not over


def _alternation(chars: int) -> str:
    """``^(w1|w2|...)$`` of eight-letter words, ``chars`` long or just over (the shape of a
    hostile 'allow-list as a regex' that costs seconds of pure-Python reading)."""
    words, n = [], 3
    while n < chars:
        words.append(f"{len(words):08d}".translate(str.maketrans("0123456789", "abcdefghij")))
        n += 9
    return "^(" + "|".join(words) + ")$"


def test_an_oversized_pattern_is_refused_before_it_is_read(tokenizer) -> None:
    """A pattern over MAX_PATTERN_CHARS is a 400 at its path (strict), a downgrade with its own
    reason (non-strict), and a 400 as a regex request, before any analysis reads it; one at
    the limit is measured and compiled as before."""
    big = _alternation(MAX_PATTERN_CHARS + 1)
    assert len(big) > MAX_PATTERN_CHARS and forced_run(big) < MAX_FORCED_RUN  # not a run problem
    compiler = ConstraintCompiler(tokenizer)
    schema = {"type": "object", "properties": {"v": {"type": "string", "pattern": big}}, "required": ["v"]}
    with pytest.raises(GrammarLimitError) as info:
        compiler.compile(JsonSchemaRequest(schema, strict=True))
    err = info.value
    assert (err.status, err.code) == (400, "grammar_too_complex")
    assert err.param == "response_format.json_schema.schema.properties.v.pattern"
    assert f"{len(big):,} characters long" in err.message and f"{MAX_PATTERN_CHARS:,}" in err.message
    loose = compiler.compile(JsonSchemaRequest(schema, strict=False))
    assert (loose.mode, loose.rung, loose.reason) == (Mode.DOWNGRADED, Rung.GENERIC_JSON, "pattern_too_long")
    with pytest.raises(GrammarLimitError) as info:
        compiler.compile(RegexRequest(big))
    assert info.value.param == "pattern"
    keyed = {"type": "object", "patternProperties": {big: {"type": "integer"}}}
    found = longest_forced_run(keyed)
    assert found is not None and found.oversized and found.path == ("patternProperties", big)
    under = _alternation(MAX_PATTERN_CHARS - 20)
    assert len(under) <= MAX_PATTERN_CHARS and longest_forced_run({"pattern": under}) is None


@pytest.mark.parametrize("pattern", ["^a{ 1000000}$", "^a{1000000 }$", "^(ab){300000, 400000}$",
                                     "a{ 20000 , }"])
def test_a_regex_request_is_measured_as_the_engine_reads_it(tokenizer, pattern: str) -> None:
    """A regex request goes to the engine as written, and its regex syntax reads a repeat with
    spaces inside the braces (Python's reads text): measured so, it is refused up front, where
    it used to pass the budget and stop the engine in mid-output."""
    compiler = ConstraintCompiler(tokenizer)
    with pytest.raises(GrammarLimitError):
        compiler.compile(RegexRequest(pattern))
    # In a JSON Schema the same pattern is the text Python reads (the engine is told so).
    text = pattern.strip("^$")
    if "(" not in text and text.endswith("}"):
        c = compiler.compile(JsonSchemaRequest({"type": "string", "pattern": pattern}))
        assert (c.mode, c.rung) == (Mode.ENFORCED, Rung.EXACT)
