"""The shortest-completion search (afm_struct/grammar/closing.py) on real compiled grammars."""

from __future__ import annotations

import json

import jsonschema
import pytest

from afm_struct.grammar.closing import closing_vocab_for, scan, shortest_completion
from afm_struct.grammar.compiler import compile_constraint
from afm_struct.grammar.spec import JsonObjectRequest, JsonSchemaRequest

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
