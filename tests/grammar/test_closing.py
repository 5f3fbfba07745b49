"""The shortest-completion search (afm_struct/grammar/closer/completion.py) on real compiled grammars."""

from __future__ import annotations

import json
import os

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from afm_struct.errors import AfmError
from afm_struct.grammar.closer.completion import closing_vocab_for, scan, shortest_completion
from afm_struct.grammar.compiler import compile_constraint
from afm_struct.grammar.spec import JsonObjectRequest, JsonSchemaRequest

from ..dev_set import dev_files

STR = {"type": "string"}
NESTED = {"type": "object", "properties": {
    "name": STR,
    "address": {"type": "object", "properties": {"street": STR, "zip": {"type": "integer"}},
                "required": ["street", "zip"], "additionalProperties": False},
    "tags": {"type": "array", "items": STR}},
    "required": ["name", "address", "tags"], "additionalProperties": False}
ENUM = {"type": "object", "properties": {"color": {"enum": ["red", "green", "greenish"]},
                                         "ok": {"type": "boolean"}},
        "required": ["color", "ok"], "additionalProperties": False}
NUMBER = {"type": "object", "properties": {"x": {"type": "number"}, "n": {"type": "integer"}},
          "required": ["x", "n"], "additionalProperties": False}
ANY_OF = {"type": "object", "properties": {"v": {"anyOf": [
    {"type": "integer"}, {"type": "object", "properties": {"k": STR}, "required": ["k"],
                          "additionalProperties": False}]}}, "required": ["v"], "additionalProperties": False}
PATTERN = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"}},
           "required": ["code"], "additionalProperties": False}
ITEMS = {"type": "object", "properties": {"items": {"type": "array", "minItems": 1, "items": {
    "type": "object", "properties": {"sku": STR, "qty": {"type": "integer"}},
    "required": ["sku", "qty"], "additionalProperties": False}}},
    "required": ["items"], "additionalProperties": False}

KEYS = {"type": "object", "properties": {
    "tBoolean": {"type": "boolean"}, "tDate": {"type": "string", "format": "date-time"},
    "tInteger": {"type": "integer"}}, "required": ["tInteger"], "additionalProperties": False}


def complete(tokenizer, schema, text: str):
    """(completed text, completion length) after feeding ``text`` to a fresh matcher."""
    request = JsonObjectRequest() if schema is None else JsonSchemaRequest(schema)
    matcher = compile_constraint(tokenizer, request).new_matcher()
    for t in tokenizer.encode(text):
        assert matcher.advance(t), text
    before = matcher.is_accepting()
    plan = shortest_completion(matcher, closing_vocab_for(tokenizer), vocab_size=tokenizer.vocab_size,
                               decode=tokenizer.decode, state=scan(text))
    assert plan is not None, text
    assert matcher.is_accepting() == before  # the search steps forks, never the matcher itself
    for t in plan:
        assert matcher.advance(t)
    assert matcher.is_accepting()
    return text + tokenizer.decode(plan), len(plan)


# ``most``: the completion length the search finds today (forced keys count by their tokens);
# a regression in the search's ordering shows up as a longer completion.
@pytest.mark.parametrize(("schema", "text", "most"), [
    (NESTED, "", 24),
    (NESTED, '{"name": "Ann", "address": {"street": "Main St', 13),
    (NESTED, '{"name": "Ann", "address": {"street": "", "zip": 12', 7),
    (NESTED, '{"name": "Ann", "address": {"street": "", "zip": 1}, "tags": ["a", "b', 2),
    (NESTED, '{"name": "A\\', 21),  # mid-escape
    (NESTED, '{"name": "A\\u00', 24),  # mid unicode escape
    (ENUM, '{"color": "gre', 9),  # enum mid-word (green or greenish)
    (NUMBER, '{"x": 12.', 8),  # a number that cannot end here
    (NUMBER, '{"x": -', 8),
    (NUMBER, '{"x": 1e', 8),
    (ANY_OF, '{"v": {"k": "ab', 2),
    (ANY_OF, '{"v": 4', 1),
    (PATTERN, '{"code": "A', 6),
    (ITEMS, '{"items": [{"sku": "x", "qty": 2}, {"sku": "y', 9),
    (ITEMS, '{"items": [{"sku": "x", "qty": 2}, ', 13),
    # Which key: a branch that opens a new string (tDate's date-time) must not end the choice
    # before the shorter one (the required tInteger) is reached (dev set Github_medium---o69319).
    (KEYS, '{"t', 7),
])
def test_completion_validates_and_is_short(tokenizer, schema, text, most) -> None:
    out, n = complete(tokenizer, schema, text)
    jsonschema.validate(json.loads(out), schema)
    assert out.startswith(text)
    assert n <= most, out


@pytest.mark.parametrize("text", ['{"a": [1, {"b": "x', '{"a": [1, 2.', '{"', '{"k": {"z": [[', ""])
def test_json_object_completions(tokenizer, text) -> None:
    out, n = complete(tokenizer, None, text)
    assert isinstance(json.loads(out), dict)
    assert n <= 6, out


def test_string_content_is_closed_not_padded(tokenizer) -> None:
    # The quote that closes the string wins over ``}"``-like tokens that would add content.
    out, _ = complete(tokenizer, NESTED, '{"name": "Jo')
    assert json.loads(out)["name"] == "Jo"


def test_complete_text_needs_nothing(tokenizer) -> None:
    out, n = complete(tokenizer, NUMBER, '{"x": 1, "n": 2}')
    assert n == 0 and out == '{"x": 1, "n": 2}'


def test_matcher_that_cannot_fork_gives_none(tokenizer) -> None:
    class NoFork:
        def is_accepting(self) -> bool:
            return False

    assert shortest_completion(NoFork(), closing_vocab_for(tokenizer), vocab_size=tokenizer.vocab_size,  # type: ignore[arg-type]
                               decode=tokenizer.decode) is None


def test_scan_tracks_nesting_strings_and_escapes() -> None:
    assert scan('{"a": [1, "x') == (2, True, False)
    assert scan('{"a": "q\\') == (1, True, True)
    assert scan('{"a": "]}\\""') == (1, False, False)
    assert scan("}}]") == (0, False, False)


# -- the grammar's own language: patterns, formats, numbers (issue 26.5, 34.2) ----------------

def _v(schema: dict) -> dict:
    return {"type": "object", "properties": {"v": schema}, "required": ["v"], "additionalProperties": False}


def closed(tokenizer, schema, text: str) -> str:
    """``text`` completed by the search (the old API: the scan state only); validated with
    formats asserted."""
    constraint = compile_constraint(tokenizer, JsonSchemaRequest(schema, strict=True))
    assert constraint.mode == "enforced"
    matcher = constraint.new_matcher()
    for t in tokenizer.encode(text):
        assert matcher.advance(t), text
    plan = shortest_completion(matcher, closing_vocab_for(tokenizer), vocab_size=tokenizer.vocab_size,
                               decode=tokenizer.decode, state=scan(text))
    assert plan is not None, f"no completion of {text!r} under {schema}"
    out = text + tokenizer.decode(plan)
    outcome = constraint.validate(out)
    assert outcome.ok, (out, outcome.errors)
    return out


@pytest.mark.parametrize(("schema", "text"), [
    # Found cut and unparseable in the soak (issue 26.5): a pattern, a duration, multipleOf.
    (_v({"type": "string", "pattern": "^[a-z]+@[a-z]+\\.com$"}), '{"v": "nhkjhjhj'),
    (_v({"type": "string", "format": "duration"}), '{"v": "P1234'),
    (_v({"type": "integer", "multipleOf": 7}), '{"v": 36000'),
    (_v({"type": "integer", "multipleOf": 11}), '{"v": 1234567'),
    (_v({"type": "string", "format": "date-time"}), '{"v": "2021-'),
    # No plan at the start turned closing off for the whole request (issue 34.2).
    ({"type": "object", "properties": {"email": {"type": "string", "format": "email"}}, "required": ["email"],
      "additionalProperties": False}, ""),
    (_v({"type": "string", "format": "email"}), '{"v": "abc'),
    (_v({"type": "string", "format": "idn-email"}), ""),
    (_v({"type": "string", "format": "duration"}), ""),
    (_v({"type": "string", "pattern": "ab"}), ""),
    (_v({"type": "string", "pattern": "x$"}), ""),
    (_v({"type": "array", "items": {"type": "number", "exclusiveMinimum": 0}, "minItems": 2}), ""),
    (_v({"type": "array", "items": {"type": "number", "exclusiveMinimum": 0}, "minItems": 2}),
     '{"v": [0.000'),
    (_v({"type": "string", "minLength": 16, "maxLength": 16}), '{"v": "'),
])
def test_values_the_grammar_does_not_let_end_are_completed(tokenizer, schema, text) -> None:
    closed(tokenizer, schema, text)


def test_a_hidden_pattern_state_is_completed_by_the_patterns_automaton(tokenizer) -> None:
    # Unanchored: every character is allowed after "2022-01-01 12:0" and after "2022-01-01 12:00",
    # so the mask does not show where the match is; the pattern's automaton does.
    from afm_struct.grammar.closer.completion import open_string

    schema = _v({"type": "string", "pattern": "\\d{4}-\\d{2}-\\d{2} \\d{2}:\\d{2}:\\d{2}", "minLength": 25})
    constraint = compile_constraint(tokenizer, JsonSchemaRequest(schema, strict=True))
    text = '{"v": "2022-01-01 12:0'
    matcher = constraint.new_matcher()
    for t in tokenizer.encode(text):
        assert matcher.advance(t)
    plan = shortest_completion(matcher, closing_vocab_for(tokenizer), vocab_size=tokenizer.vocab_size,
                               decode=tokenizer.decode, state=scan(text), content=open_string(text))
    assert plan is not None
    assert constraint.validate(text + tokenizer.decode(plan)).ok


def test_every_branch_is_planned_the_shortest_tool_call_wins(tokenizer) -> None:
    # Issue 34.2: with [create_event, order_items] the plan was a long create_event call (or
    # none at all: its email and date-time values), when an order_items call is much shorter.
    from afm_struct.tools import plan_tools

    plan = plan_tools(tokenizer, [CREATE_EVENT, ORDER_ITEMS], "required", False,
                      messages=[{"role": "user", "content": "hi"}])
    vocab = closing_vocab_for(tokenizer)
    found = shortest_completion(plan.constraint.new_matcher(), vocab, vocab_size=tokenizer.vocab_size,
                                decode=tokenizer.decode)
    alone = plan_tools(tokenizer, [ORDER_ITEMS], "required", False,
                       messages=[{"role": "user", "content": "hi"}])
    shortest = shortest_completion(alone.constraint.new_matcher(), vocab, vocab_size=tokenizer.vocab_size,
                                   decode=tokenizer.decode)
    assert found is not None and shortest is not None
    text = tokenizer.decode(found)
    call = json.loads(text[text.index("{"):text.rindex("}") + 1])
    assert call["name"] == "order_items", text
    jsonschema.validate(call["arguments"], ORDER_ITEMS["function"]["parameters"])
    assert len(found) <= len(shortest) + 2


CREATE_EVENT = {"type": "function", "function": {"name": "create_event", "strict": True, "parameters": {
    "type": "object", "properties": {
        "title": STR, "start": {"type": "string", "format": "date-time"},
        "end": {"type": "string", "format": "date-time"},
        "attendees": {"type": "array", "items": {"type": "string", "format": "email"}, "minItems": 1},
        "location": STR, "reminder_minutes": {"type": "integer", "minimum": 5}},
    "required": ["title", "start", "end", "attendees", "location", "reminder_minutes"],
    "additionalProperties": False}}}
ORDER_ITEMS = {"type": "function", "function": {"name": "order_items", "strict": True, "parameters": {
    "type": "object", "properties": {"items": {"type": "array", "minItems": 1, "items": {
        "type": "object", "properties": {"sku": STR, "quantity": {"type": "integer", "minimum": 1}},
        "required": ["sku", "quantity"], "additionalProperties": False}}},
    "required": ["items"], "additionalProperties": False}}}


# -- property: dev-set schemas cut at random points are completed to valid instances -------------

DEV_FILES = dev_files()
EXAMPLES = int(os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES", "0")) or 40


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
          derandomize=not os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES"))
@given(index=st.integers(0, len(DEV_FILES) - 1), pick=st.integers(0, 1 << 30), cut=st.floats(0, 1))
def test_dev_set_instances_cut_anywhere_are_completed(tokenizer, index, pick, cut) -> None:
    """A valid dev-set instance, cut after any token, is completed to an instance the original
    schema accepts (formats asserted): the completion is in the grammar's own language."""
    from afm_struct.grammar.closer.completion import open_string

    doc = json.loads(DEV_FILES[index].read_text())
    valid = [t["data"] for t in doc.get("tests", []) if t.get("valid")]
    try:
        constraint = compile_constraint(tokenizer, JsonSchemaRequest(doc["schema"], strict=True))
    except AfmError:
        return
    if constraint.mode != "enforced" or not valid:
        return  # a downgraded schema's grammar is looser than the schema (the header says so)
    ids = tokenizer.encode(json.dumps(valid[pick % len(valid)], ensure_ascii=False))
    matcher = constraint.new_matcher()
    prefix = ids[:int(cut * len(ids))]
    if not all(matcher.advance(t) for t in prefix):
        return  # an instance the grammar does not take (property order: benchmarks/masks)
    text = tokenizer.decode(prefix)
    plan = shortest_completion(matcher, closing_vocab_for(tokenizer), vocab_size=tokenizer.vocab_size,
                               decode=tokenizer.decode, state=scan(text), content=open_string(text),
                               max_tokens=4096)
    assert plan is not None, (DEV_FILES[index].name, text[-80:])
    outcome = constraint.validate(text + tokenizer.decode(plan))
    assert outcome.ok, (DEV_FILES[index].name, (text + tokenizer.decode(plan))[-120:], outcome.errors)


@pytest.mark.parametrize("pattern", ["^a{1000000}$", "^(ab){500000}$", "(a|b)*a(a|b){14}"])
def test_a_pattern_whose_automaton_would_be_huge_is_not_built(pattern) -> None:
    # The soak's hostile patterns: unrolled, ^a{1000000}$ is a million-state automaton (22 GB
    # before the process was killed), and the subset construction of (a|b)*a(a|b){n} has 2^n
    # states.  The search does without the pattern's automaton there (its escape still runs).
    from afm_struct.grammar.closer.hints import ClosingHints, _automaton

    assert _automaton(pattern) is None
    assert ClosingHints(frozenset(), (pattern,)).completions("") == []


def test_a_raw_string_value_is_closed_by_its_end_tag_not_padded(tokenizer) -> None:
    # Qwen3-Coder writes a string parameter as raw text up to '\n</parameter>\n'.  Every
    # character is allowed there, so the mask never shows that the tag ends the value; the
    # search took the allowed commas and brackets for JSON structure and padded the value
    # (',,,,,,,,,,]]') before finding the tag, or found nothing.  The tag is a hint now.
    from afm_struct.tools import plan_tools

    tool = {"type": "function", "function": {"name": "f", "strict": True, "parameters": {
        "type": "object", "properties": {"a": STR}, "required": ["a"], "additionalProperties": False}}}
    plan = plan_tools(tokenizer, [tool], "required", False, format_name="qwen3_coder",
                      messages=[{"role": "user", "content": "hi"}])
    matcher = plan.constraint.new_matcher()
    text = "<tool_call>\n<function=f>\n<parameter=a>\nsome [[raw, text {with: brackets"
    for t in tokenizer.encode(text):
        assert matcher.advance(t), text
    found = shortest_completion(matcher, closing_vocab_for(tokenizer), vocab_size=tokenizer.vocab_size,
                                decode=tokenizer.decode, state=scan(text))
    assert found is not None
    assert tokenizer.decode(found) == "\n</parameter>\n</function>\n</tool_call>", tokenizer.decode(found)


# -- a byte-level vocabulary: the value after ``: `` is reached through forced text ------------

URI = {"type": "string", "pattern": "^\\S+:\\S+$"}
# The fuzzer's case (issue 34.2, tests/fuzz survey, qwen3): the dev set's CMOA provenance record
# (Github_hard---o23555) reduced to what broke the search: a boolean, then a `uri` string.
EDTF = {"type": "string", "pattern": "^\\d{2}[\\d\\?ux]{2}[\\?|~]?(?:-[01\\?ux][\\d\\?ux][\\?|~]?)?$"}
BOOLEAN_THEN_URI = {"type": "array", "minItems": 1, "items": {
    "type": "object", "properties": {"certain": {"type": "boolean"}, "method": URI, "text": STR},
    "required": ["certain", "method", "text"], "additionalProperties": False}}
# With the record's date pattern, whose characters (``]``, ``|``, ``~``...) are hints too.
URI_AND_DATE = {"type": "array", "minItems": 1, "items": {
    "type": "object",
    "properties": {"certain": {"type": "boolean"}, "method": URI, "text": STR, "date": EDTF},
    "required": ["certain", "method", "text"], "additionalProperties": False}}


@pytest.fixture(scope="module")
def byte_tokenizer(tmp_path_factory):  # type: ignore[no-untyped-def]
    """The tiny qwen3's tokenizer (tests/models/gguf_factory.py): bytes and few merges, so after
    ``"certain":`` only a space is allowed, and every value is spelled a character at a time."""
    pytest.importorskip("gguf")
    from afm_struct.models.loader import load_model
    from tests.models.gguf_factory import tiny_gguf

    _, path = tiny_gguf("qwen3", tmp_path_factory.mktemp("qwen3"))
    return load_model(str(path), weights="float32").tokenizer


@pytest.mark.parametrize("text", ["", '[{"certain": true, "method": "acq',
                                  '[{"certain": false, "method": "a:b", "text": "x"}, {"certain":'])
def test_a_string_reached_through_forced_text_is_left_by_its_own_pattern(byte_tokenizer, text) -> None:
    # After ``"certain":`` only `` `` is allowed (not structural), so the search escapes; its
    # breadth-first layers ran through the forced ``false, "method": "`` into the uri string,
    # where ``"0:`` and ``"00`` allow the same tokens: one was merged into the other, ``:`` never
    # written, and the search gave up (no plan at the start: the request was neither refused
    # nor closed, and max_tokens cut it unparseable).  The string is now escaped as a string.
    completed = closed(byte_tokenizer, BOOLEAN_THEN_URI, text)
    assert json.loads(completed)[0]["method"].count(":") >= 1


@pytest.mark.parametrize("char", ["\u00e9", "\u7f03", "\U000e1861"])
def test_a_string_cut_inside_a_character_is_left_by_its_own_pattern(byte_tokenizer, char) -> None:
    # The fuzzer's CMOA case at 400 tokens: the random model wrote a uri string of random
    # characters, byte by byte; cut after a lead byte only continuation bytes may follow, so
    # the escape had no candidate, the patterns' endings were refused there (':' is no
    # continuation byte), and the dive finished the character then wrote the first hinted
    # punctuation (']' of the date's pattern) forever: no completion, every step in the zone.
    # The character is finished first now (with the first continuation bytes the grammar
    # allows: another character than the model's, cut), then escaped as any string.
    from afm_struct.grammar.closer.completion import open_string

    tok = byte_tokenizer
    constraint = compile_constraint(tok, JsonSchemaRequest(URI_AND_DATE, strict=True))
    text = '[{"certain": true, "method": "k&pa]J'
    lead = tok.encode(char)[0]
    assert tok.decode([lead]) == "\ufffd"  # a lead byte alone
    matcher = constraint.new_matcher()
    for t in tok.encode(text):
        assert matcher.advance(t)
    plan = shortest_completion(matcher, closing_vocab_for(tok), vocab_size=tok.vocab_size, decode=tok.decode,
                               state=scan(text), content=open_string(text), prefix=[lead])
    assert plan is not None
    out = tok.decode([*tok.encode(text), lead, *plan])
    assert constraint.validate(out).ok, out
    assert json.loads(out)[0]["method"].startswith("k&pa]J"), out
