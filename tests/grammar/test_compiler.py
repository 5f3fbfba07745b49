"""The compile API: every ladder rung, timeouts, cache, bad input, whitespace, validate/sanitize."""

from __future__ import annotations

import json

import numpy as np
import pytest

from afm_struct.errors import SchemaError
from afm_struct.grammar.compiler import ConstraintCompiler, compile_constraint
from afm_struct.grammar.engines.protocol import allocate_bitmask
from afm_struct.grammar.patterns.classify import classify_pattern
from afm_struct.grammar.spec import (
    CompileOptions,
    JsonObjectRequest,
    JsonSchemaRequest,
    LarkRequest,
    Mode,
    RegexRequest,
    Rung,
    ToolCallRequest,
    ToolDef,
)

PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


def allowed(matcher, tokenizer, token: int) -> bool:  # type: ignore[no-untyped-def]
    bm = allocate_bitmask(1, tokenizer.vocab_size)
    matcher.fill_mask(bm[0])
    return bool((int(bm[0, token >> 5]) >> (token & 31)) & 1)


def accepts(constraint, tokenizer, text: str) -> bool:  # type: ignore[no-untyped-def]
    m = constraint.new_matcher()
    for t in tokenizer.encode(text):
        if not allowed(m, tokenizer, t) or not m.advance(t):
            return False
    return m.is_accepting()


# ------------------------------------------------------------------------ the ladder

def test_rung_exact(compiler, tokenizer) -> None:  # type: ignore[no-untyped-def]
    c = compiler.compile(JsonSchemaRequest(PERSON))
    assert (c.mode, c.rung, c.reason) == (Mode.ENFORCED, Rung.EXACT, None)
    assert accepts(c, tokenizer, json.dumps({"name": "Ada", "age": 36}))
    assert not accepts(c, tokenizer, json.dumps({"name": "Ada", "age": "36"}))


def test_rung_relaxed(compiler, tokenizer) -> None:  # type: ignore[no-untyped-def]
    schema = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
    c = compiler.compile(JsonSchemaRequest(schema))
    assert (c.mode, c.rung, c.reason) == (Mode.DOWNGRADED, Rung.RELAXED, "unsupported_keyword:uniqueItems")
    assert c.flag_downgraded
    assert accepts(c, tokenizer, "[1, 1]")  # best-effort grammar: uniqueness not enforced...
    assert not c.validate("[1, 1]").ok      # ...but caught by validation against the original
    assert c.validate("[1, 2]").ok


def test_rung_generic_json_with_precise_regex_reason(compiler, tokenizer) -> None:  # type: ignore[no-untyped-def]
    schema = {"type": "object", "properties": {"id": {"type": "string", "pattern": "^[a-z]+(?<!x)$"}}}
    c = compiler.compile(JsonSchemaRequest(schema))
    assert (c.mode, c.rung, c.reason) == (Mode.DOWNGRADED, Rung.GENERIC_JSON, "regex_lookaround")
    assert accepts(c, tokenizer, json.dumps({"id": "abx"}))  # any object...
    assert not accepts(c, tokenizer, "[1]")                   # ...of the top-level type only
    assert not c.validate(json.dumps({"id": "abx"})).ok


def test_rung_unconstrained_on_timeout(tokenizer) -> None:  # type: ignore[no-untyped-def]
    fresh = ConstraintCompiler(tokenizer, CompileOptions(timeout_s=1e-6))
    c = fresh.compile(JsonSchemaRequest(PERSON))
    assert (c.mode, c.rung, c.reason) == (Mode.DOWNGRADED, Rung.UNCONSTRAINED, "compile_timeout")
    assert c.new_matcher() is None
    fenced = 'Sure!\n```json\n{"name": "Ada", "age": 36}\n```\nDone.'
    assert c.sanitize(fenced) == '{"name": "Ada", "age": 36}'
    assert c.validate(c.sanitize('Here: {"name": "Ada", "age": 36} ok')).ok


def test_schema_over_size_limit_is_served_generic(tokenizer) -> None:  # type: ignore[no-untyped-def]
    small = ConstraintCompiler(tokenizer, CompileOptions(max_schema_bytes=50))
    c = small.compile(JsonSchemaRequest(PERSON))
    assert (c.rung, c.reason) == (Rung.GENERIC_JSON, "schema_too_large")
    deep = ConstraintCompiler(tokenizer, CompileOptions(max_depth=2))
    assert deep.compile(JsonSchemaRequest(PERSON)).reason == "schema_too_deep"


# ------------------------------------------------------------------------ cache

def test_cache_hit_is_marked_and_shares_the_grammar(tokenizer) -> None:  # type: ignore[no-untyped-def]
    c = ConstraintCompiler(tokenizer)
    first = c.compile(JsonSchemaRequest(PERSON))
    second = c.compile(JsonSchemaRequest(json.loads(json.dumps(PERSON))))  # equal, not identical
    assert not first.cached and second.cached
    assert second.grammar is first.grammar
    other_ws = ConstraintCompiler(tokenizer, CompileOptions(whitespace="compact"))
    assert not other_ws.compile(JsonSchemaRequest(PERSON)).cached


def test_property_order_is_part_of_the_cache_key(tokenizer) -> None:  # type: ignore[no-untyped-def]
    # The grammar emits properties in the schema's order, so a reordered schema is another grammar.
    c = ConstraintCompiler(tokenizer)
    c.compile(JsonSchemaRequest(PERSON))
    reordered = c.compile(JsonSchemaRequest(json.loads(json.dumps(PERSON, sort_keys=True))))
    assert not reordered.cached
    assert accepts(reordered, tokenizer, '{"age": 3, "name": "x"}')
    assert not accepts(reordered, tokenizer, '{"name": "x", "age": 3}')


def test_compile_constraint_shares_a_cache(tokenizer) -> None:  # type: ignore[no-untyped-def]
    opts = CompileOptions(cache_size=8)
    compile_constraint(tokenizer, JsonSchemaRequest({"type": "boolean"}), opts)
    assert compile_constraint(tokenizer, JsonSchemaRequest({"type": "boolean"}), opts).cached


# ------------------------------------------------------------------------ bad input

@pytest.mark.parametrize(("schema", "path"), [
    ({"type": "strng"}, "$.type"),
    ({"properties": {"a": {"minimum": "3"}}}, "$.properties.a.minimum"),
    ({"properties": {"a": {"$ref": "#/$defs/missing"}}}, '$.properties.a["$ref"]'),
    ([1, 2], "$"),
    ({"required": "name"}, "$.required"),
])
def test_bad_schema_raises_schema_error_with_path(compiler, schema, path: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SchemaError) as info:
        compiler.compile(JsonSchemaRequest(schema))
    assert info.value.path == path
    assert info.value.status == 400


def test_bad_regex_and_grammar_raise_schema_error(compiler) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SchemaError):
        compiler.compile(RegexRequest("(unclosed"))
    with pytest.raises(SchemaError):
        compiler.compile(LarkRequest("start: undefined_rule"))


def test_unknown_backend_is_a_typed_error(tokenizer) -> None:  # type: ignore[no-untyped-def]
    from afm_struct.errors import InvalidRequestError

    with pytest.raises(InvalidRequestError):
        ConstraintCompiler(tokenizer, CompileOptions(backend="nope"))  # type: ignore[arg-type]


# ------------------------------------------------------------------------ whitespace

def test_default_whitespace_is_bounded_yet_accepts_json_dumps(compiler, tokenizer) -> None:  # type: ignore[no-untyped-def]
    c = compiler.compile(JsonSchemaRequest(PERSON))
    assert accepts(c, tokenizer, json.dumps({"name": "A", "age": 1}))
    space = tokenizer.encode(" ")[0]
    m = c.new_matcher()
    for t in tokenizer.encode('{"name":'):
        assert m.advance(t)
    steps = 0
    while allowed(m, tokenizer, space) and steps < 50:
        assert m.advance(space)
        steps += 1
    assert steps <= 1  # json.dumps writes one space after ':' and no run can grow further


@pytest.mark.parametrize("mode", ["compact", "flexible"])
def test_other_whitespace_modes(tokenizer, mode: str) -> None:  # type: ignore[no-untyped-def]
    c = ConstraintCompiler(tokenizer, CompileOptions(whitespace=mode)).compile(JsonSchemaRequest(PERSON))
    compact = json.dumps({"name": "A", "age": 1}, separators=(",", ":"))
    assert accepts(c, tokenizer, compact)
    pretty = json.dumps({"name": "A", "age": 1}, indent=2)
    assert accepts(c, tokenizer, pretty) is (mode == "flexible")
    assert not accepts(c, tokenizer, '{"name":' + " " * 40 + '"A","age":1}')


# ------------------------------------------------------------------------ other kinds

def test_json_object_regex_lark(compiler, tokenizer) -> None:  # type: ignore[no-untyped-def]
    obj = compiler.compile(JsonObjectRequest())
    assert obj.mode is Mode.ENFORCED and accepts(obj, tokenizer, '{"a": [1, 2]}')
    assert not obj.validate("[1]").ok
    rx = compiler.compile(RegexRequest(r"[0-9]{3}-[a-z]+"))
    assert accepts(rx, tokenizer, "123-abc") and not accepts(rx, tokenizer, "12-abc")
    assert rx.validate("123-abc").ok and not rx.validate("x").ok
    lark = compiler.compile(LarkRequest('start: "yes" | "no"'))
    assert accepts(lark, tokenizer, "yes") and not accepts(lark, tokenizer, "maybe")
    assert lark.validate("no").ok and not lark.validate("nope").ok
    look = compiler.compile(RegexRequest("(?=a)a+"))
    assert (look.rung, look.reason) == (Rung.UNCONSTRAINED, "regex_lookaround")


def test_tool_call_entry_point(compiler, tokenizer) -> None:  # type: ignore[no-untyped-def]
    weather = ToolDef("get_weather", {"type": "object", "properties": {"city": {"type": "string"}},
                                       "required": ["city"], "additionalProperties": False,
                                       "$defs": {"unit": {"enum": ["C", "F"]}}})
    time_tool = ToolDef("get_time", {"type": "object", "properties": {"unit": {"$ref": "#/$defs/u"}},
                                      "$defs": {"u": {"enum": ["s", "ms"]}}})
    c = compiler.compile(ToolCallRequest((weather, time_tool)))
    assert c.mode is Mode.ENFORCED
    assert accepts(c, tokenizer, json.dumps({"name": "get_weather", "arguments": {"city": "Oslo"}}))
    assert accepts(c, tokenizer, json.dumps({"name": "get_time", "arguments": {"unit": "ms"}}))
    assert not accepts(c, tokenizer, json.dumps({"name": "get_time", "arguments": {"unit": "h"}}))
    assert not accepts(c, tokenizer, json.dumps({"name": "other", "arguments": {}}))
    with pytest.raises(SchemaError):
        compiler.compile(ToolCallRequest((weather, weather)))


def test_finished_object_stops_generation(compiler, tokenizer) -> None:  # type: ignore[no-untyped-def]
    c = compiler.compile(JsonSchemaRequest(PERSON))
    m = c.new_matcher()
    ids = tokenizer.encode(json.dumps({"name": "A", "age": 1}))
    for t in ids[:-1]:
        m.advance(t)
    assert not m.is_finished()
    m.advance(ids[-1])
    assert m.is_accepting() and m.is_finished() and m.error() is None


def test_forced_tokens_are_not_consumed(compiler, tokenizer) -> None:  # type: ignore[no-untyped-def]
    c = compiler.compile(JsonSchemaRequest({"type": "object", "properties": {"answer": {"type": "integer"}},
                                            "required": ["answer"]}))
    m = c.new_matcher()
    forced = m.forced_tokens()
    assert tokenizer.decode(forced).startswith('{"answer')
    assert m.forced_tokens() == forced
    for t in forced:
        assert m.advance(t)


def test_regex_classifier() -> None:
    assert classify_pattern("^(?!@@)[a-z]+$") == "regex_lookaround"
    assert classify_pattern(r"(a)\1") == "regex_backreference"
    assert classify_pattern("(?<=a)b") == "regex_lookaround"
    assert classify_pattern("^[a-z]+(?:-[a-z]+)*$") is None
    assert classify_pattern(r"\p{L}+") is None


def test_mask_rows_are_independent(compiler, tokenizer) -> None:  # type: ignore[no-untyped-def]
    c = compiler.compile(JsonSchemaRequest(PERSON))
    bm = np.full((2, allocate_bitmask(1, tokenizer.vocab_size).shape[1]), -1, dtype=np.int32)
    c.new_matcher().fill_mask(bm[1])
    assert (bm[0] == -1).all() and not (bm[1] == -1).all()


@pytest.mark.parametrize("options", [
    {"lenient": True},
    {"item_separator": ";", "key_separator": "="},
    {"whitespace_flexible": True},
    {"coerce_one_of": True},
])
def test_a_schemas_own_engine_options_are_not_read(compiler, tokenizer, options) -> None:  # type: ignore[no-untyped-def]
    """llguidance reads JSON options from a schema's "x-guidance" over the server's: a request
    made the engine lenient (uniqueItems dropped, served as exact, duplicates accepted) or its
    separators "=" and ";" (not JSON, served as exact).  The schema now compiles as without it."""
    unique = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
    plain = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
             "required": ["a", "b"], "additionalProperties": False}
    for schema in (unique, plain):
        alone = compiler.compile(JsonSchemaRequest(schema))
        c = compiler.compile(JsonSchemaRequest({**schema, "x-guidance": options}))
        assert (c.mode, c.rung, c.reason) == (alone.mode, alone.rung, alone.reason)
    assert not accepts(compiler.compile(JsonSchemaRequest({**plain, "x-guidance": options})),
                       tokenizer, '{"a"="x";"b"=1}')
    assert not accepts(compiler.compile(JsonSchemaRequest({**plain, "x-guidance": options})),
                       tokenizer, '{ "a" :  "x" , "b": 1 }')
    assert accepts(compiler.compile(JsonSchemaRequest({**plain, "x-guidance": options})),
                   tokenizer, '{"a": "x", "b": 1}')
