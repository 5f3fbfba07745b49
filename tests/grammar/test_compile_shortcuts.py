"""The compile's shortcuts give what the full path gives (issue 43 item 3: compile time).

* Reference walks skipped where the schema's text holds no ``"$ref"``: the admission check,
  the satisfiability analysis and the rewrites answer the same with the text as without it,
  on random documents with and without references (dangling ones, ones inside ``default``
  data, a ``"$ref"`` that is only a string, nested ``$id``).
* The empty-language check's probe (a first token the parser takes) says what the first mask
  says, on random schemas and on grammars empty from the start, emptying later or not at all.
* The closing hints are made when the closing search first reads them, not by the compile.

``AFM_STRUCT_RANDOM_EXAMPLES=N`` runs the random drivers at length.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from afm_struct.errors import SchemaError
from afm_struct.grammar.closer.hints import grammar_hints
from afm_struct.grammar.compiler import ConstraintCompiler, schema_key
from afm_struct.grammar.empty_language import first_mask_empty, language_empty
from afm_struct.grammar.engines.llguidance_engine import EngineCompileError, LLGuidanceEngine
from afm_struct.grammar.schema.check import check_schema
from afm_struct.grammar.schema.paths import may_refer
from afm_struct.grammar.schema.rewrites import canonical_json, rewrite_schema
from afm_struct.grammar.schema.satisfiability import find_empty
from afm_struct.grammar.spec import CompileOptions, JsonSchemaRequest

from .schema_strategies import leaf

# 15 in `make test` (drawing a document costs more than checking it); more with the variable.
EXAMPLES = int(os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES", "0")) or 15
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))


@st.composite
def documents(draw: Any) -> Any:
    """A root schema around random leaves, with or without references of every kind."""
    root: dict[str, Any] = dict(draw(leaf()))
    if draw(st.booleans()):
        root["$defs"] = {"d": draw(leaf()), "e": {"type": "string", "minLength": 1}}
        where = draw(st.sampled_from(["properties", "anyOf", "allOf", "items"]))
        ref = {"$ref": draw(st.sampled_from(["#/$defs/d", "#/$defs/e", "#/$defs/none", "#", "other.json"]))}
        if where == "properties":
            root["properties"] = {**root.get("properties", {}), "r": ref}
        elif where == "items":
            root["items"] = ref
        else:
            root[where] = [*root.get(where, []), ref]
    extra = draw(st.sampled_from(["none", "ref_in_default", "ref_as_string", "nested_id"]))
    if extra == "ref_in_default":  # data, not a reference
        root["default"] = {"$ref": "#/$defs/none"}
    elif extra == "ref_as_string":
        root["description"] = "$ref"
    elif extra == "nested_id":
        nested = {"$id": "http://x.example/n", "type": "string"}
        root["properties"] = {**root.get("properties", {}), "n": nested}
    return root


def _check(schema: Any, text: str | None) -> tuple[str, str] | None:
    try:
        check_schema(schema, text=text)
    except SchemaError as exc:
        return type(exc).__name__, str(exc)
    return None


def _rewrite(schema: Any, text: str | None) -> tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]]:
    out = rewrite_schema(schema, text)
    return canonical_json(out.schema), out.applied, out.sites


@SETTINGS
@given(documents())
def test_reference_walks_skipped_only_where_they_would_find_nothing(schema: Any) -> None:
    text = schema_key(schema)
    assert may_refer(text) == ('"$ref"' in text)
    assert _check(schema, text) == _check(schema, None)
    assert find_empty(schema, text) == find_empty(schema)
    assert _rewrite(schema, text) == _rewrite(schema, None)


def test_a_dangling_reference_is_still_refused_with_the_text() -> None:
    schema = {"properties": {"a": {"$ref": "#/$defs/missing"}}}
    with pytest.raises(SchemaError, match="unresolvable"):
        check_schema(schema, text=schema_key(schema))


@pytest.fixture(scope="module")
def engine(compiler: ConstraintCompiler) -> LLGuidanceEngine:
    return compiler.llguidance  # (the shared compiler's: its tokenizer's trie is built once)


def _same_verdicts(engine: LLGuidanceEngine, grammar: Any) -> bool:
    vocab = engine.vocab_size
    return language_empty(grammar, vocab, engine.opening_tokens) == first_mask_empty(grammar, vocab)


@SETTINGS
@given(leaf())
def test_probe_says_what_the_first_mask_says_on_random_schemas(engine: LLGuidanceEngine, schema: Any) -> None:
    try:
        grammar = engine.compile_json_schema(schema)
    except EngineCompileError:
        return
    assert _same_verdicts(engine, grammar)


# Empty from the start (the first two), emptying after a first token, empty only past a token the
# probe tries, and not empty: the probe decides none of the empty ones wrongly.
LARK = ['start: x\nx: x', 'start: x | y\nx: y\ny: x', 'start: "H" x | "z"\nx: x', 'start: "{" x\nx: x',
        'start: "{" x | "[" "]"\nx: x', 'start: /[a-z]+/', 'start: "{}"', 'start: %json {"type": "integer"}']
SCHEMAS = [{"type": "number", "multipleOf": 0.1, "minimum": 0.25, "maximum": 0.35},
           {"type": "object", "properties": {"a": {"type": "number", "multipleOf": 0.1, "minimum": 0.25,
                                                    "maximum": 0.35}}, "required": ["a"]},
           {"type": "integer"}, {"enum": ["x", 2]}, {"type": "string", "pattern": "^z+$"}]


@pytest.mark.parametrize("source", LARK + [json.dumps(s) for s in SCHEMAS])
def test_probe_says_what_the_first_mask_says_on_chosen_grammars(engine: LLGuidanceEngine,
                                                                source: str) -> None:
    grammar = (engine.compile_json_schema(json.loads(source)) if source.startswith("{")
               else engine.compile_lark(source))
    assert _same_verdicts(engine, grammar)


def test_empty_from_the_start_is_empty_under_the_probe(engine: LLGuidanceEngine) -> None:
    grammar = engine.compile_json_schema(SCHEMAS[0])
    assert not grammar.takes_one_of(engine.opening_tokens)
    assert language_empty(grammar, engine.vocab_size, engine.opening_tokens)


def test_closing_hints_are_made_on_first_read_not_by_the_compile(tokenizer) -> None:  # type: ignore[no-untyped-def]
    compiler = ConstraintCompiler(tokenizer, CompileOptions())
    compiled = compiler.compile(JsonSchemaRequest({"type": "object", "properties": {
        "d": {"type": "string", "pattern": "^[0-9]{4}$"}}, "required": ["d"]}))
    grammar: Any = compiled.grammar
    assert grammar._hints is None  # the compile did not read the grammar's patterns
    matcher = compiled.new_matcher()
    fork = matcher.fork()
    assert grammar._hints is None  # nor did making matchers
    made, expected = matcher.closing_hints, grammar_hints(grammar.grammar)
    assert (made.patterns, made.terminators) == (expected.patterns, expected.terminators) != ((), ())
    assert fork.closing_hints is made and grammar._hints is made  # made once, for the grammar
