"""Other servers' constraint fields over real HTTP (scripted model): enforced, or a 400 naming them.

The scripted model wants to say "Hello there, world!", which matches none of the constraints
below: every output that matches was forced by the mask the field compiled to.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import httpx
import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import USER, decode, stream_raw

CODE = "[0-9]{3}-[a-z]{2}"
YES_NO_GBNF = 'root ::= answer "-" digit digit\nanswer ::= "yes" | "no"\ndigit ::= [0-9]\n'
YES_NO_LARK = 'start: ("yes" | "no") "-" /[0-9]{2}/'
YES_NO = re.compile(r"(yes|no)-[0-9]{2}")
CLOSED = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}, "ok": {"type": "boolean"}},
          "required": ["answer", "ok"], "additionalProperties": False}


def post(url: str, **fields: Any) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", timeout=60,
                      json={"messages": USER, "max_tokens": 40, "temperature": 0, **fields})


def content(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["message"]["content"]


def error(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 400, response.text
    return response.json()["error"]


def matches_regex(text: str) -> bool:
    return re.fullmatch(CODE, text) is not None


def one_of_the_choices(text: str) -> bool:
    return text in ("red", "green", "blue and grey")


def parses_yes_no(text: str) -> bool:
    return YES_NO.fullmatch(text) is not None


def follows_closed(text: str) -> bool:
    jsonschema.validate(json.loads(text), CLOSED)
    return True


def is_an_object(text: str) -> bool:
    return isinstance(json.loads(text), dict)


CHOICES = ["red", "green", "blue and grey"]
ENFORCED: list[tuple[str, dict[str, Any], Any]] = [
    # vLLM, legacy fields
    ("guided_regex", {"guided_regex": CODE}, matches_regex),
    ("guided_choice", {"guided_choice": CHOICES}, one_of_the_choices),
    ("guided_grammar GBNF", {"guided_grammar": YES_NO_GBNF}, parses_yes_no),
    ("guided_grammar Lark", {"guided_grammar": YES_NO_LARK}, parses_yes_no),
    ("guided_json object", {"guided_json": CLOSED}, follows_closed),
    ("guided_json string", {"guided_json": json.dumps(CLOSED)}, follows_closed),
    ("guided_json + backend", {"guided_json": CLOSED, "guided_decoding_backend": "xgrammar"}, follows_closed),
    # vLLM, structured_outputs
    ("structured_outputs.regex", {"structured_outputs": {"regex": CODE}}, matches_regex),
    ("structured_outputs.choice", {"structured_outputs": {"choice": CHOICES}}, one_of_the_choices),
    ("structured_outputs.grammar", {"structured_outputs": {"grammar": YES_NO_GBNF}}, parses_yes_no),
    ("structured_outputs.json", {"structured_outputs": {"json": CLOSED, "backend": "guidance"}},
     follows_closed),
    ("structured_outputs.json_object", {"structured_outputs": {"json_object": True}}, is_an_object),
    ("structured_outputs disable_fallback", {"structured_outputs": {"regex": CODE, "disable_fallback": True}},
     matches_regex),
    # SGLang
    ("regex", {"regex": CODE}, matches_regex),
    ("ebnf", {"ebnf": YES_NO_GBNF}, parses_yes_no),
    ("json_schema string", {"json_schema": json.dumps(CLOSED)}, follows_closed),
    # llama.cpp
    ("grammar GBNF", {"grammar": YES_NO_GBNF}, parses_yes_no),
    ("json_schema object", {"json_schema": CLOSED}, follows_closed),
    ("response_format json_object + schema",
     {"response_format": {"type": "json_object", "schema": CLOSED}}, follows_closed),
    # TGI
    ("grammar TGI json", {"grammar": {"type": "json", "value": CLOSED}}, follows_closed),
    ("grammar TGI regex", {"grammar": {"type": "regex", "value": CODE}}, matches_regex),
    # Ollama
    ("format schema", {"format": CLOSED}, follows_closed),
    ("format json", {"format": "json"}, is_an_object),
]


@pytest.fixture(scope="module")
def live(tokenizer):
    from afm_struct.testing import scripted_loaded_model
    from server.live import start_server

    server = start_server(scripted_loaded_model(tokenizer, "Hello there, world!"))
    yield server
    server.stop()


@pytest.mark.parametrize("fields, holds", [(f, h) for _, f, h in ENFORCED], ids=[i for i, _, _ in ENFORCED])
def test_a_dialect_field_is_enforced(live, fields, holds) -> None:
    response = post(live.url, **fields)
    text = content(response)
    assert holds(text), text
    assert response.headers["x-afm-constraint-mode"] == "exact"
    assert "x-grammar-constraints" not in response.headers


def test_a_dialect_field_is_enforced_when_streaming(live) -> None:
    response, payloads = stream_raw(live.url, {"messages": USER, "max_tokens": 40, "guided_regex": CODE})
    assert response.status_code == 200
    assert response.headers["x-afm-constraint-mode"] == "exact"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in decode(payloads) if c["choices"])
    assert matches_regex(text), text


def test_disable_additional_properties_closes_open_objects(live) -> None:
    schema = {"type": "object", "properties": {"a": {"enum": [1]}}, "required": ["a"]}
    text = content(post(live.url, structured_outputs={"json": schema, "disable_additional_properties": True}))
    assert json.loads(text) == {"a": 1}, text


def test_a_constraint_served_without_mask_says_so(live) -> None:
    """A lookaround cannot be a mask: the regex runs unconstrained, and both headers say it."""
    response = post(live.url, guided_regex="(?=H)Hello.*")
    assert response.status_code == 200
    assert response.headers["x-grammar-constraints"] == "downgraded"
    assert response.headers["x-afm-constraint-mode"] == "unconstrained"


def test_disable_fallback_refuses_a_constraint_that_cannot_be_exact(live) -> None:
    err = error(post(live.url, structured_outputs={"regex": "(?=H)Hello.*", "disable_fallback": True}))
    assert err["code"] == "constraint_not_exact" and err["param"] == "structured_outputs.regex"


UNSUPPORTED = "unsupported_parameter"
REFUSED: list[tuple[dict[str, Any], str, str]] = [
    ({"structured_outputs": {"regex": CODE, "grammer": "x"}}, "structured_outputs.grammer", UNSUPPORTED),
    # a structural tag sent as JSON text: its errors name the field (its parts have no request path)
    ({"structured_outputs": {"structural_tag": '{"format": {"type": "grammar"}}'}},
     "structured_outputs.structural_tag", UNSUPPORTED),
    ({"structured_outputs": {"json_object": True, "disable_any_whitespace": True}},
     "structured_outputs.disable_any_whitespace", UNSUPPORTED),
    ({"structured_outputs": {"regex": CODE, "whitespace_pattern": " ?"}},
     "structured_outputs.whitespace_pattern", UNSUPPORTED),
    ({"structured_outputs": {"disable_fallback": True}}, "structured_outputs", "invalid_value"),
    ({"structured_outputs": "json"}, "structured_outputs", "invalid_value"),
    ({"guided_json": CLOSED, "guided_whitespace_pattern": " ?"}, "guided_whitespace_pattern",
     UNSUPPORTED),
    ({"guided_choice": []}, "guided_choice", "invalid_value"),
    ({"guided_choice": ["a", 1]}, "guided_choice", "invalid_value"),
    ({"guided_regex": 5}, "guided_regex", "invalid_value"),
    ({"guided_json": "{not json"}, "guided_json", "invalid_value"),
    ({"guided_decoding_backend": 3}, "guided_decoding_backend", "invalid_value"),
    ({"grammar": {"type": "lark", "value": "start: \"a\""}}, "grammar.type", UNSUPPORTED),
    ({"format": "yaml"}, "format", "invalid_value"),
    # unknown fields whose names ask for a constraint, and the legacy function calling
    ({"guided_json_object": True}, "guided_json_object", UNSUPPORTED),
    ({"json_mode": True}, "json_mode", UNSUPPORTED),
    ({"structural_tag": {"structures": [{"begin": "<f>", "schema": {}, "end": "</f>"}], "triggers": ["<f"],
                         "tags": []}}, "structural_tag.tags", UNSUPPORTED),
    ({"grammar_lazy": True, "grammar": YES_NO_GBNF}, "grammar_lazy", UNSUPPORTED),
    ({"functions": [{"name": "f"}]}, "functions", UNSUPPORTED),
    ({"function_call": "auto"}, "function_call", UNSUPPORTED),
    # response_format keys this server does not read, and a type it does not implement
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}, "schema": CLOSED}},
     "response_format.schema", UNSUPPORTED),
    ({"response_format": {"type": "text", "regex": CODE}}, "response_format.regex", UNSUPPORTED),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "Schema": CLOSED}}},
     "response_format.json_schema.Schema", UNSUPPORTED),
    ({"tools": [{"type": "function", "function": {"name": "f", "input_schema": CLOSED}}]},
     "tools.0.function.input_schema", UNSUPPORTED),
    ({"response_format": {"type": "structural_tag", "format": {"type": "sequence", "elements": [
        {"type": "const_string", "value": "a"}, {"type": "any_text"}, {"type": "grammar", "grammar": "x"}]}}},
     "response_format.format.elements.2.type", UNSUPPORTED),
]


@pytest.mark.parametrize("fields, param, code", REFUSED, ids=[p for _, p, _ in REFUSED])
def test_a_field_that_cannot_be_enforced_is_a_400_naming_it(live, fields, param, code) -> None:
    err = error(post(live.url, **fields))
    assert (err["param"], err["code"]) == (param, code), err
    assert param.split(".")[0] in err["message"]


INVALID: list[tuple[dict[str, Any], str, str]] = [
    ({"guided_grammar": 'root ::= "a" (\n  | "b"'}, "guided_grammar", "at line 2, column 8"),
    ({"ebnf": 'root ::= "a"\nx ::= "\\q"'}, "ebnf", "at line 2, column 9"),
    ({"grammar": "root ::= missing"}, "grammar", "Rule 'missing' not found"),
    ({"guided_grammar": 'start: "a" | foo'}, "guided_grammar", "at line 1, column 8"),
    ({"guided_regex": "(ab"}, "guided_regex", "unclosed group"),
    ({"structured_outputs": {"regex": "(ab"}}, "structured_outputs.regex", "unclosed group"),
    ({"guided_json": {"type": "objectt"}}, "guided_json", "objectt"),
    ({"format": {"type": "object", "required": "a"}}, "format", "required"),
    ({"response_format": {"type": "json_object", "schema": {"minimum": "x"}}}, "response_format.schema",
     "minimum"),
]


def test_a_regex_over_the_lexer_budget_is_a_400_at_its_field(live) -> None:
    err = error(post(live.url, structured_outputs={"regex": "a{200000}"}))
    assert (err["param"], err["code"]) == ("structured_outputs.regex", "grammar_too_complex"), err
    assert "$.structured_outputs.regex" in err["message"], err


@pytest.mark.parametrize("fields, param, phrase", INVALID, ids=[p for _, p, _ in INVALID])
def test_an_invalid_constraint_is_a_400_at_its_field(live, fields, param, phrase) -> None:
    err = error(post(live.url, **fields))
    assert err["param"] == param and err["code"] == "invalid_schema", err
    assert phrase in err["message"], err


TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]
CONFLICTS: list[tuple[dict[str, Any], tuple[str, str]]] = [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": CLOSED}},
      "guided_regex": CODE}, ("guided_regex", "response_format")),
    ({"response_format": {"type": "json_object"}, "format": "json"}, ("format", "response_format")),
    ({"guided_regex": CODE, "guided_choice": CHOICES}, ("guided_regex", "guided_choice")),
    ({"regex": CODE, "structured_outputs": {"regex": CODE}}, ("regex", "structured_outputs.regex")),
    ({"structured_outputs": {"regex": CODE, "choice": CHOICES}},
     ("structured_outputs.regex", "structured_outputs.choice")),
    ({"tools": TOOLS, "tool_choice": "required", "guided_grammar": YES_NO_GBNF}, ("guided_grammar", "tools")),
    ({"tools": TOOLS, "grammar": YES_NO_GBNF}, ("grammar", "tools")),
    ({"response_format": {"type": "json_object", "schema": CLOSED}, "guided_json": CLOSED},
     ("response_format.schema", "guided_json")),
]


@pytest.mark.parametrize("fields, names", CONFLICTS, ids=["+".join(n) for _, n in CONFLICTS])
def test_two_constraints_at_once_are_a_400_naming_both(live, fields, names) -> None:
    err = error(post(live.url, **fields))
    assert err["code"] == "conflicting_constraints", err
    assert all(n in err["message"] for n in names), err
    assert err["param"] in names


def test_tools_the_model_may_not_call_leave_the_field_alone(live) -> None:
    text = content(post(live.url, tools=TOOLS, tool_choice="none", guided_regex=CODE))
    assert matches_regex(text), text


@pytest.mark.parametrize("fields", [
    {"frobnicate": True, "user": "u", "logit_bias": {}, "presence_penalty": 0.1},
    {"guided_decoding_backend": "outlines"},
    {"format": ""},
    {"guided_json": None, "structured_outputs": None},
    {"structured_outputs": {"backend": "xgrammar"}},
    {"response_format": {"type": "text"}},
])
def test_fields_that_ask_for_no_constraint_are_accepted(live, fields) -> None:
    response = post(live.url, **fields)
    assert content(response) == "Hello there, world!"
    assert "x-afm-constraint-mode" not in response.headers


def test_unknown_benign_keys_of_a_tool_are_still_ignored(live) -> None:
    tools = [{"type": "function", "function": {"name": "lookup", "examples": ["x"],
                                               "parameters": TOOLS[0]["function"]["parameters"]}}]
    response = post(live.url, tools=tools, tool_choice="none")
    assert content(response) == "Hello there, world!"


# Each way of asking for a constraint, alone valid; any two at once must be refused.
SOURCES: dict[str, tuple[dict[str, Any], Any]] = {
    "guided_regex": ({"guided_regex": CODE}, matches_regex),
    "guided_choice": ({"guided_choice": CHOICES}, one_of_the_choices),
    "guided_grammar": ({"guided_grammar": YES_NO_GBNF}, parses_yes_no),
    "guided_json": ({"guided_json": CLOSED}, follows_closed),
    "structured_outputs.regex": ({"structured_outputs": {"regex": CODE}}, matches_regex),
    "regex": ({"regex": CODE}, matches_regex),
    "ebnf": ({"ebnf": YES_NO_GBNF}, parses_yes_no),
    "json_schema": ({"json_schema": CLOSED}, follows_closed),
    "grammar": ({"grammar": YES_NO_GBNF}, parses_yes_no),
    "format": ({"format": "json"}, is_an_object),
    "response_format": ({"response_format": {"type": "json_object"}}, is_an_object),
    "tools": ({"tools": TOOLS, "tool_choice": "required"}, None),
}
EXAMPLES = int(os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES", "0")) or 12


@settings(max_examples=EXAMPLES, deadline=None, derandomize=not os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES"),
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(sorted(SOURCES)), min_size=1, max_size=3, unique=True))
def test_any_combination_is_enforced_alone_or_refused_together(live, names) -> None:
    """One source alone is enforced; a dialect field with any other source is a 400 naming two
    of them (response_format with tools is the one old combination that is served)."""
    fields: dict[str, Any] = {}
    for name in names:
        fields.update(SOURCES[name][0])
    response = post(live.url, **fields)
    if set(names) <= {"response_format", "tools"}:
        assert response.status_code == 200, response.text
        holds = SOURCES[names[0]][1]
        if len(names) == 1 and holds is not None:
            assert holds(content(response))
        return
    if len(names) == 1:
        assert SOURCES[names[0]][1](content(response))
        return
    err = error(response)
    assert err["code"] == "conflicting_constraints", err
    words = set(re.findall(r"[\w.]+", err["message"]))
    named = [n for n in names if n in words]
    assert len(named) >= 2 and err["param"] in names, (names, err)
