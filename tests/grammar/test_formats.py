"""``enforced`` is exact for ``format``: every string a grammar accepts for a format passes the
format-asserting validator (jsonschema, the draft's FORMAT_CHECKER, format-nongpl installed).

Each format is either enforced exactly (llguidance's own regex, or ours from
``afm_struct/grammar/schema/string_formats.py``) or the schema is downgraded with ``unsupported_format:<f>``.
Our regexes are checked against the checker with hypothesis (strings generated from the regex
must pass: the direction "enforced" needs) and, where we claim equivalence, the other way.
"""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from afm_struct.grammar.schema import string_formats as formats
from afm_struct.grammar.schema.rewrites import rewrite_schema
from afm_struct.grammar.schema.string_formats import RULES, exact_format, rule_for
from afm_struct.grammar.spec import JsonSchemaRequest, Mode
from afm_struct.grammar.validation import validate_json

from ..decoding.randomized import examples

CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER
# Strings drawn from the formats' large regexes are slow to generate: ``make test`` draws 50 per
# format (this file was the suite's longest, 200 each); ``make fuzz`` runs it with
# ``AFM_STRUCT_RANDOM_EXAMPLES=200`` (benchmarks/suite/README.md).
SETTINGS = settings(max_examples=examples(50), deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))


def conforms(value: str, fmt: str) -> bool:
    return CHECKER.conforms(value, fmt)


def accepts(constraint: Any, tokenizer: Any, value: Any) -> bool:
    """Does the compiled grammar accept ``value`` (serialized as MaskBench does)?"""
    matcher = constraint.new_matcher()
    for token in tokenizer.encode(json.dumps(value, ensure_ascii=False)):
        if not matcher.advance(token):
            return False
    return matcher.is_accepting()


def test_format_nongpl_is_installed() -> None:
    # Without these packages FormatChecker silently skips the format (everything "valid").
    for fmt in ("uri", "uri-reference", "uri-template", "iri", "date-time", "time", "duration",
                "hostname", "idn-hostname", "json-pointer", "relative-json-pointer"):
        assert fmt in CHECKER.checkers, fmt
    assert not conforms("http://example.com/resource/{", "uri-template")


# ---------------------------------------------------------------- the decision per format

EXPECTED = {
    "date-time": "pattern", "date": "pattern", "time": "pattern", "duration": "native",
    "email": "native", "idn-email": "native", "hostname": "native", "idn-hostname": "pattern",
    "ipv4": "native", "ipv6": "native", "uuid": "native", "uri": "native",
    "uri-reference": "pattern", "iri": "pattern", "iri-reference": "pattern",
    "uri-template": "pattern", "json-pointer": "pattern", "relative-json-pointer": "pattern",
    "regex": "unsupported",
}


def test_every_asserted_format_has_a_decision() -> None:
    assert {f: r.kind for f, r in RULES.items()} == EXPECTED
    assert set(CHECKER.checkers) <= set(RULES)  # nothing the checker asserts goes unnoticed


@pytest.mark.parametrize("fmt", sorted(EXPECTED))
def test_each_format_is_exact_or_downgraded_with_reason(compiler, tokenizer, fmt: str) -> None:
    c = compiler.compile(JsonSchemaRequest({"type": "string", "format": fmt}))
    if EXPECTED[fmt] == "unsupported":
        assert c.mode is Mode.DOWNGRADED and c.reason == f"unsupported_format:{fmt}"
    else:
        assert c.mode is Mode.ENFORCED, (fmt, c.reason)


def test_annotation_only_formats_are_dropped_per_draft() -> None:
    assert rule_for("int32", 0) is None
    assert rule_for("regex", 0) is not None  # asserted, inexpressible: stays for the ladder
    assert rule_for("color", 0) is None  # only draft 3 asserts CSS colours
    assert rule_for("color", 3) is not None and rule_for("color", 3).kind == "unsupported"
    draft4 = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "string", "format": "uuid"}
    assert rewrite_schema(draft4).schema == draft4  # not asserted there, still enforced (stricter)


# ---------------------------------------------------------------- the issue's example

def test_uri_template_example_is_rejected(compiler, tokenizer) -> None:
    schema = {"type": "object", "properties": {"href": {"type": "string", "format": "uri-template"}},
              "required": ["href"]}
    c = compiler.compile(JsonSchemaRequest(schema))
    assert c.mode is Mode.ENFORCED
    bad, good = {"href": "http://example.com/resource/{"}, {"href": "http://example.com/resource/{id}"}
    assert not accepts(c, tokenizer, bad)
    assert accepts(c, tokenizer, good)
    assert not validate_json(json.dumps(bad), schema).ok and validate_json(json.dumps(good), schema).ok


# ---------------------------------------------------------------- our regexes vs the checker

PATTERN_FORMATS = sorted(f for f, r in RULES.items() if r.regex is not None)


@pytest.mark.parametrize("fmt", PATTERN_FORMATS)
def test_regex_accepts_only_valid_strings(fmt: str) -> None:
    regex = re.compile(RULES[fmt].regex)

    @SETTINGS
    @given(st.from_regex(regex, fullmatch=True))
    def check(value: str) -> None:
        assert conforms(value, fmt), value

    check()


# Formats whose regex we claim EQUAL to the checker on ASCII strings without a final newline
# (Python's ``$`` in the checkers also matches before one): valid strings drawn from an
# independent description of the format must match ours.
_DIGITS = st.integers(0, 9999).map(lambda y: f"{y:04d}")


def _date_strings() -> st.SearchStrategy[str]:
    return st.tuples(_DIGITS, st.integers(0, 13), st.integers(0, 32)).map(
        lambda t: f"{t[0]}-{t[1]:02d}-{t[2]:02d}")


def _time_strings() -> st.SearchStrategy[str]:
    offset = st.sampled_from(["Z", "z", "+00:00", "-23:59", "+24:00", "+05:60", ""])
    frac = st.sampled_from(["", ".5", ".123456789", "."])
    return st.tuples(st.integers(0, 24), st.integers(0, 60), st.integers(0, 61), frac, offset).map(
        lambda t: f"{t[0]:02d}:{t[1]:02d}:{t[2]:02d}{t[3]}{t[4]}")


EQUIVALENT: dict[str, st.SearchStrategy[str]] = {
    "date": _date_strings(),
    "time": _time_strings(),
    "date-time": st.tuples(_date_strings(), st.sampled_from("Tt"), _time_strings()).map("".join),
    "json-pointer": st.text(alphabet="/~01a%", max_size=12),
    "uri-reference": st.text(alphabet="ab:/?#[]@%1F.-v", max_size=16),
}


@pytest.mark.parametrize("fmt", sorted(EQUIVALENT))
def test_regex_equals_checker(fmt: str) -> None:
    regex = re.compile(RULES[fmt].regex)

    @SETTINGS
    @given(EQUIVALENT[fmt])
    def check(value: str) -> None:
        assert (regex.fullmatch(value) is not None) == conforms(value, fmt), value

    check()


TRICKY: dict[str, list[tuple[str, bool]]] = {
    "date": [("2024-02-29", True), ("2023-02-29", False), ("1900-02-29", False), ("2000-02-29", True),
             ("0000-01-01", False), ("0001-01-01", True), ("9999-12-31", True), ("2023-04-31", False),
             ("2023-1-01", False), ("2023-01-01\n", False)],
    "date-time": [("2024-02-29T00:00:00Z", True), ("2023-02-29T00:00:00Z", False),
                  ("2020-01-01T23:59:60Z", False), ("2020-01-01t00:00:00z", True),
                  ("2020-01-01T00:00:00", False), ("2020-01-01T00:00:00+24:00", False),
                  ("0000-01-01T00:00:00Z", False), ("2020-01-01T00:00:00.Z", False)],
    "time": [("23:59:59Z", True), ("23:59:60Z", False), ("12:00:00", False), ("12:00:00.5-08:00", True)],
    "uri-template": [("http://example.com/resource/{", False), ("http://example.com/{id}", True),
                     ("{+path}/x{?q,r*}{#f}", True), ("{}", False), ("a}", False), ("{a:1000}", False),
                     ("{a:999}", True), ("{%41}", False), ("{=a}", False), ("a b", False),
                     ("/{a.b}", True), ("{a..b}", False)],  # last: the package takes it, RFC 6570 not,
    "json-pointer": [("", True), ("/", True), ("/a~0b~1c", True), ("a", False), ("/~", False),
                     ("/~2", False)],
    "relative-json-pointer": [("0", True), ("1/a", True), ("10#", True), ("01", False), ("100", False),
                              ("", False), ("#", False), ("1~", False)],
    "idn-hostname": [("example.com", True), ("ab--c.com", False), ("xn--abc.com", False), ("a-b.c", True),
                     ("-a.com", False), ("a" * 64, False)],
    "uri-reference": [("", True), ("a:b", True), ("//h/p?q#f", True), ("a b", False), ("%zz", False),
                      ("http://[::1]/", True), ("[::1]", False)],
    "iri": [("http://[1:2:3:4:5:6:7:8]/", True), ("http://a/b?c#d", True), ("a b", False)],
}


@pytest.mark.parametrize("fmt,value,expected", [(f, v, e) for f, cases in TRICKY.items() for v, e in cases])
def test_tricky_strings(fmt: str, value: str, expected: bool) -> None:
    assert (re.fullmatch(RULES[fmt].regex, value) is not None) == expected
    if expected:
        assert conforms(value, fmt)


# ---------------------------------------------------------------- the compiled grammar itself

# Strings through llguidance: valid ones the grammar must take, invalid ones it must refuse.
GRAMMAR_CASES: dict[str, list[str]] = {
    "date": ["2024-02-29", "2023-02-29", "0000-01-01", "1999-12-31", "2023-13-01"],
    "date-time": ["2024-02-29T12:00:00Z", "2023-02-29T12:00:00Z", "2020-01-01T23:59:60Z",
                  "2020-01-01t00:00:00.123+05:30"],
    "time": ["23:59:59Z", "23:59:60Z", "00:00:00+00:00", "12:00:00"],
    "hostname": ["example.com", "a." * 126 + "aa", "a." * 127 + "a", "-a", "a" * 64],
    "ipv4": ["1.2.3.4", "01.2.3.4", "256.0.0.1", "255.255.255.255"],
    "ipv6": ["::1", "1:2:3:4:5:6:7::", "1::2::3", "::ffff:1.2.3.4", "1:2:3:4:5:6:7:8:9"],
    "uuid": ["123e4567-e89b-12d3-a456-426614174000", "123e4567e89b12d3a456426614174000"],
    "uri": ["http://example.com/a?b#c", "a:", "http://[1::]/", "http://a b", "//no-scheme"],
    "uri-reference": ["//h/p", "../a", "http://x/{", "a b"],
    "uri-template": ["http://example.com/resource/{", "http://example.com/{id}{?q*}", "{a:1000}"],
    "duration": ["P1D", "PT1H", "P1W", "P", "P1Y2M3DT4H5M6S", "PT"],
    "email": ["a@b.c", "a@", "@b", "a@[1.2.3.4]"],
    "json-pointer": ["", "/a/~0", "/~2", "a"],
    "relative-json-pointer": ["0#", "1/a", "01", "100"],
}


@pytest.mark.parametrize("fmt", sorted(GRAMMAR_CASES))
def test_grammar_never_accepts_an_invalid_string(compiler, tokenizer, fmt: str) -> None:
    c = compiler.compile(JsonSchemaRequest({"type": "string", "format": fmt}))
    assert c.mode is Mode.ENFORCED
    for value in GRAMMAR_CASES[fmt]:
        if accepts(c, tokenizer, value):
            assert conforms(value, fmt), (fmt, value)


@pytest.mark.parametrize("fmt", ["date", "date-time", "time", "uri-template", "json-pointer", "duration",
                                 "ipv6", "uri"])
def test_grammar_vs_checker_on_generated_strings(compiler, tokenizer, fmt: str) -> None:
    # Candidates drawn from our regex (or llguidance's) near-misses: mutate one character.
    c = compiler.compile(JsonSchemaRequest({"type": "string", "format": fmt}))
    source = formats._URI if fmt == "uri" else RULES[fmt].regex  # llguidance's own: none here
    base = (st.from_regex(re.compile(source), fullmatch=True) if source is not None
            else st.text(alphabet="PTYMDWHS0123456789:abcdef.", max_size=14))

    @settings(max_examples=examples(20), deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(base, st.integers(0, 40), st.sampled_from(list("0:9-{}/T.Z%")))
    def check(value: str, at: int, ch: str) -> None:
        for candidate in (value, value[:at] + ch + value[at + 1:]):
            if accepts(c, tokenizer, candidate):
                assert conforms(candidate, fmt), (fmt, candidate)

    check()


# ---------------------------------------------------------------- rewriting mechanics

def test_pattern_next_to_an_existing_pattern_is_intersected(compiler, tokenizer) -> None:
    schema = {"type": "string", "format": "date", "pattern": "^2"}
    out = exact_format(schema, 0)
    assert out is not None and out["pattern"] == "^2" and "pattern" in out["allOf"][0]
    c = compiler.compile(JsonSchemaRequest(schema))
    assert c.mode is Mode.ENFORCED
    assert accepts(c, tokenizer, "2024-02-29")
    assert not accepts(c, tokenizer, "2023-02-29") and not accepts(c, tokenizer, "1999-01-01")


def test_hostname_gets_a_length_bound_and_keeps_a_tighter_one() -> None:
    assert exact_format({"type": "string", "format": "hostname"}, 0) == {
        "type": "string", "format": "hostname", "maxLength": 253}
    out = exact_format({"type": "string", "format": "hostname", "maxLength": 20}, 0)
    assert out == {"type": "string", "format": "hostname", "maxLength": 20, "allOf": [{"maxLength": 253}]}


def test_rewritten_schema_is_not_looser_than_the_original() -> None:
    # jsonschema on the rewritten schema (patterns instead of formats) never accepts what the
    # original, format-asserted, rejects.
    schema = {"type": "object", "properties": {
        "d": {"type": ["string", "null"], "format": "date"},
        "t": {"type": "string", "format": "uri-template"}}}
    rewritten = rewrite_schema(schema)
    assert "exact_format" in rewritten.applied
    for value in ({"d": "2023-02-29"}, {"d": None}, {"t": "a{"}, {"t": "{a}"}, {"d": 3}):
        text = json.dumps(value)
        if validate_json(text, rewritten.schema).ok:
            assert validate_json(text, schema).ok, value


def test_draft3_time_means_strptime() -> None:
    draft3 = {"$schema": "http://json-schema.org/draft-03/schema#", "type": "string", "format": "time"}
    pattern = rewrite_schema(draft3).schema["pattern"]
    assert re.fullmatch(pattern[1:-1], "12:00:00")
    assert not re.fullmatch(pattern[1:-1], "12:00:00Z")
    assert jsonschema.Draft3Validator.FORMAT_CHECKER.conforms("12:00:00", "time")
