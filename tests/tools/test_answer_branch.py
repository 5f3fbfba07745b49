"""Tools and a JSON output format in one grammar, for every tool syntax in the table (issue 49.1).

The composed grammar of each syntax (embedded tokenizer; tags its vocabulary lacks are written
as text) must take a valid answer and a valid call, refuse an answer off the schema and prose;
the syntax's turn must read the answer as content and the call as a call.  Unit level: the HTTP
doors are tests/server/test_composed_answer_http.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from afm_struct.grammar.spec import JsonObjectRequest, JsonSchemaRequest, Rung
from afm_struct.tools import ToolPlan, load_table, plan_tools
from afm_struct.tools.answer_branch import reads_as_call
from afm_struct.tools.prompt import render_call
from afm_struct.turn.events import Text

from ..grammar.test_compiler import accepts

ANSWER = {"type": "object", "properties": {"q": {"type": "string", "maxLength": 5}, "n": {"type": "integer"}},
          "required": ["q"], "additionalProperties": False}
CITY = {"type": "object", "properties": {"days": {"type": "integer"}}, "required": ["days"],
        "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "lookup", "strict": True, "parameters": CITY}}]
FORMATS = sorted(f.name for f in load_table().formats)
# Harmony's answer is the final channel's message.
ANSWER_HEAD = {"harmony": "<|channel|>final<|message|>"}


def plan(tokenizer: Any, syntax: str, answer: Any, choice: Any = "auto") -> ToolPlan:
    base = plan_tools(tokenizer, TOOLS, choice, messages=[{"role": "user", "content": "x"}],
                      format_name=syntax, compile_grammar=False)
    return base.constrained(tokenizer, answer=answer)


def call_text(syntax: str) -> str:
    fmt = load_table().get(syntax)
    return fmt.history.calls_open + render_call(fmt, "lookup", {"days": 3}) + fmt.history.calls_close


def read(p: ToolPlan, text: str) -> tuple[str, list[tuple[str, Any]]]:
    """(content, calls) as the syntax's turn reads ``text``."""
    turn = p.make_router()
    events = turn.feed(text) + turn.finish()
    content = "".join(e.text for e in events if isinstance(e, Text))
    return content, [(c.name, json.loads(c.arguments)) for c in turn.calls]


@pytest.fixture(scope="module")
def plans(tokenizer) -> dict[str, ToolPlan]:
    return {s: plan(tokenizer, s, JsonSchemaRequest(ANSWER, strict=True)) for s in FORMATS}


@pytest.mark.parametrize("syntax", FORMATS)
def test_one_grammar_takes_a_valid_answer_or_a_valid_call(plans, tokenizer, syntax) -> None:
    p = plans[syntax]
    assert p.answered and p.answer_rung == "exact" and p.rungs == {"lookup": "exact"}
    head = ANSWER_HEAD.get(syntax, "")
    answer = json.dumps({"q": "abc", "n": 3})
    assert accepts(p.constraint, tokenizer, head + answer)
    assert accepts(p.constraint, tokenizer, call_text(syntax))
    # off the schema: too long, an unknown key, a missing required key; prose
    for bad in ({"q": "abcdefgh"}, {"q": "a", "x": 1}, {"n": 1}):
        assert not accepts(p.constraint, tokenizer, head + json.dumps(bad)), bad
    assert not accepts(p.constraint, tokenizer, head + "Hello there")
    assert not accepts(p.constraint, tokenizer, "Hello there")


@pytest.mark.parametrize("syntax", FORMATS)
def test_the_turn_reads_the_answer_as_content_and_the_call_as_a_call(plans, syntax) -> None:
    p = plans[syntax]
    answer = json.dumps({"q": "abc"})
    assert read(p, ANSWER_HEAD.get(syntax, "") + answer) == (answer, [])
    assert read(p, call_text(syntax)) == ("", [("lookup", {"days": 3})])


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "lookup"}}],
                         ids=["required", "named"])
def test_required_or_named_keeps_only_the_calls(tokenizer, choice) -> None:
    p = plan(tokenizer, "hermes", JsonSchemaRequest(ANSWER, strict=True), choice)
    assert not p.answered and p.answer_rung is None
    assert accepts(p.constraint, tokenizer, call_text("hermes"))
    assert not accepts(p.constraint, tokenizer, json.dumps({"q": "abc"}))


def test_the_answer_climbs_the_plain_ladder(tokenizer) -> None:
    """A schema a plain request serves relaxed is embedded relaxed (and reported so); json_object
    is any object; a schema with no mask of its own (none here) would leave the grammar as before."""
    unique = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True, "maxItems": 3}
    p = plan(tokenizer, "hermes", JsonSchemaRequest(unique, strict=True))
    assert p.answered and p.answer_rung == Rung.RELAXED.value
    assert accepts(p.constraint, tokenizer, "[1, 2]") and not accepts(p.constraint, tokenizer, '{"a": 1}')
    p = plan(tokenizer, "hermes", JsonObjectRequest())
    assert p.answered and p.answer_rung == "exact"
    assert accepts(p.constraint, tokenizer, '{"a": [1]}') and not accepts(p.constraint, tokenizer, "[1]")


@pytest.mark.parametrize("syntax, schema, composed", [
    ("llama3_json", ANSWER, True),
    ("llama3_json", {**ANSWER, "properties": {"q": {"type": "string"}, "name": {"type": "string"}}}, False),
    ("llama3_json", {"type": "object"}, False),  # open: may hold "name"
    ("llama3_json", {"type": "string"}, True),
    ("pythonic", ANSWER, True),
    ("pythonic", {"type": "array"}, False),  # "[" opens the call list
    ("hermes", {"type": "array"}, True),
])
def test_syntaxes_without_an_opener_compose_only_answers_that_cannot_read_as_calls(
        tokenizer, syntax, schema, composed) -> None:
    p = plan(tokenizer, syntax, JsonSchemaRequest(schema))
    assert p.answered is composed
    assert reads_as_call(load_table().get(syntax), schema) is not composed
