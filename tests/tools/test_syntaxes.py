"""Every tool-call syntax: calls written in it are enforced by its grammar and read back equal.

The property tests draw random tools (closed schemas of strings, numbers, booleans, enums,
nullable strings, arrays and nested objects), random calls to them, write the calls as the
syntax's grammar writes them, check the grammar accepts the text, and feed it to the router cut
at random places: the calls must come back with the same names and arguments, as JSON argument
deltas by index, whatever the cuts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from afm_struct.grammar.spec import ToolDef
from afm_struct.tools import ToolCallRouter, detect_format, load_table
from afm_struct.tools.grammar import compile_tool_grammar
from afm_struct.tools.syntaxes import render_calls

from ..decoding.randomized import examples
from .conftest import as_deltas, assemble, check_first_deltas
from .syntax_cases import FORMATS, chunked, tool_calls

DATA = Path(__file__).parent / "data"
PROPERTY = settings(max_examples=examples(120), deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))
GRAMMAR = settings(max_examples=examples(12), deadline=None, derandomize=True, database=None,
                   suppress_health_check=list(HealthCheck))


def route(fmt: Any, chunks: list[str], tools: tuple[ToolDef, ...] = (),
          **kwargs: Any) -> list[dict[str, Any]]:
    router = ToolCallRouter(fmt, tools=tools, id_factory=lambda: "call_0", **kwargs)
    deltas = [d for chunk in chunks for d in as_deltas(router.feed(chunk))]
    return deltas + as_deltas(router.finish())


def representable(fmt: Any, calls: list[tuple[str, Any, Any]]) -> bool:
    """A tag-pair syntax cannot write a value that contains its own closing tag."""
    if fmt.body != "tagged":
        return True
    end = fmt.layout.value_after.strip()
    return all(end not in json.dumps(args, ensure_ascii=False) and end not in str(args)
               for _, args, _ in calls)


def one_call_per_turn(fmt: Any, calls: list[Any]) -> list[Any]:
    return calls[:1] if fmt.name == "harmony" else calls


@PROPERTY
@given(data=st.data())
def test_calls_read_back_equal_however_the_text_is_split(data) -> None:
    fmt = data.draw(st.sampled_from(FORMATS))
    tools, calls = data.draw(tool_calls())
    calls = one_call_per_turn(fmt, calls)
    assume(representable(fmt, calls))
    text = render_calls(fmt, calls)
    whole = route(fmt, [text], tools)
    split = route(fmt, chunked(data.draw, text), tools)
    check_first_deltas(split)
    got, got_whole = assemble(split), assemble(whole)
    assert got["content"] == "" and got["reasoning_content"] == "", (fmt.name, text, got)
    assert [(c["name"], json.loads(c["arguments"])) for c in got["tool_calls"]] == \
        [(name, args) for name, args, _ in calls], (fmt.name, text)
    # The JSON text a client receives does not depend on how the model's text was cut.
    assert got["tool_calls"] == got_whole["tool_calls"]


@GRAMMAR
@given(data=st.data())
def test_the_grammar_accepts_what_the_syntax_writes(tokenizer, data) -> None:
    fmt = data.draw(st.sampled_from(FORMATS))
    tools, calls = data.draw(tool_calls(max_calls=2))
    calls = one_call_per_turn(fmt, calls)
    assume(representable(fmt, calls))
    text = render_calls(fmt, calls)
    planned = compile_tool_grammar(tokenizer, fmt, tools, required=True, parallel=True)
    assert not planned.downgraded, (fmt.name, planned.reason)
    assert planned.constraint is not None
    outcome = planned.constraint.validate(text)
    assert outcome.ok, (fmt.name, text, outcome.errors, planned.grammar)


W = {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"},
    "unit": {"type": "string", "enum": ["c", "f"]}},
    "required": ["city", "days"], "additionalProperties": False}
TOOLS = (ToolDef("get_weather", parameters=W, strict=True), ToolDef("ping", strict=True))
GOOD = {
    "qwen3_coder": ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                    "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"),
    "glm45": ("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
              "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"),
    "harmony": ('<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>'
                '{"city": "Paris", "days": 3}<|call|>'),
    "pythonic": '[get_weather(city="Paris", days=3)]',
}
BAD = {  # a string where the integer goes, a missing required parameter, an unknown tool
    "qwen3_coder": [GOOD["qwen3_coder"].replace("\n3\n", "\nthree\n"),
                    GOOD["qwen3_coder"].replace("<parameter=days>\n3\n</parameter>\n", ""),
                    GOOD["qwen3_coder"].replace("get_weather", "get_time")],
    "glm45": [GOOD["glm45"].replace(">3<", ">three<"),
              GOOD["glm45"].replace("<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n", ""),
              GOOD["glm45"].replace("get_weather", "get_time")],
    "harmony": [GOOD["harmony"].replace("3}", '"3"}'), GOOD["harmony"].replace(', "days": 3', ""),
                GOOD["harmony"].replace("get_weather", "get_time")],
    "pythonic": ['[get_weather(city="Paris", days="3")]', '[get_weather(city="Paris")]',
                 '[get_time(city="Paris", days=3)]', '[get_weather(city="Paris", days=3, unit=true)]'],
}


@pytest.mark.parametrize("name", sorted(GOOD))
def test_each_new_syntax_is_enforced_in_every_mode(tokenizer, name: str) -> None:
    fmt = load_table().get(name)
    strict = compile_tool_grammar(tokenizer, fmt, TOOLS, required=True, parallel=True)
    assert not strict.downgraded and strict.rungs == {"get_weather": "exact", "ping": "exact"}
    assert strict.constraint is not None and strict.constraint.validate(GOOD[name]).ok
    for bad in BAD[name]:
        assert not strict.constraint.validate(bad).ok, bad
    assert not strict.constraint.validate("It is sunny.").ok  # required: a call, no text
    one = compile_tool_grammar(tokenizer, fmt, TOOLS, required=True, parallel=False).constraint
    two = render_calls(fmt, [("get_weather", {"city": "P", "days": 1}, W), ("ping", {}, None)])
    assert one is not None and not one.validate(two).ok  # parallel_tool_calls: false
    if name != "harmony":  # one call per Harmony turn: the model stops at <|call|>
        assert strict.constraint.validate(two).ok
    auto = compile_tool_grammar(tokenizer, fmt, TOOLS, required=False, parallel=True).constraint
    assert auto is not None and auto.validate(GOOD[name]).ok
    free = "<|channel|>final<|message|>It is sunny." if name == "harmony" else "It is sunny."
    assert auto.validate(free).ok
    # Non-strict tools are guided by their parameters too.
    loose = tuple(ToolDef(t.name, parameters=t.parameters) for t in TOOLS)
    guided = compile_tool_grammar(tokenizer, fmt, loose, required=True, parallel=True)
    assert guided.guided == {"get_weather": "exact", "ping": "exact"} and not guided.downgraded
    assert guided.constraint is not None and not guided.constraint.validate(BAD[name][0]).ok


def test_harmony_analysis_is_reasoning_and_final_is_content() -> None:
    fmt = load_table().get("harmony")
    text = ("<|channel|>analysis<|message|>The user wants weather.<|end|><|start|>assistant"
            + GOOD["harmony"])
    got = assemble(route(fmt, list(text), TOOLS))
    assert got["reasoning_content"] == "The user wants weather." and got["content"] == ""
    assert [(c["name"], json.loads(c["arguments"])) for c in got["tool_calls"]] == \
        [("get_weather", {"city": "Paris", "days": 3})]
    answer = ("<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant"
              "<|channel|>final<|message|>It is 21 degrees.")
    got = assemble(route(fmt, list(answer), TOOLS))
    assert got == {"content": "It is 21 degrees.", "reasoning_content": "Easy.", "tool_calls": []}


def test_harmony_grammar_leaves_the_analysis_channel_free(tokenizer) -> None:
    fmt = load_table().get("harmony")
    c = compile_tool_grammar(tokenizer, fmt, TOOLS, required=True, parallel=True).constraint
    assert c is not None
    assert c.validate("<|channel|>analysis<|message|>anything {at all<|end|><|start|>assistant"
                      + GOOD["harmony"]).ok


@pytest.mark.parametrize("name", ["qwen3_coder", "glm45"])
def test_tag_pair_values_are_typed_by_the_schema(name: str) -> None:
    """A string parameter's value is raw (even when it looks like a number); others are JSON."""
    fmt = load_table().get(name)
    schema = {"type": "object", "properties": {"code": {"type": "string"}, "n": {"type": "number"},
                                               "opts": {"type": "object"}}}
    tools = (ToolDef("run", parameters=schema),)
    args = {"code": "42", "n": 4.5, "opts": {"a": [1, "x"]}}
    text = "Sure.\n" + render_calls(fmt, [("run", args, schema)]) + "\nDone."
    got = assemble(route(fmt, list(text), tools))
    assert json.loads(got["tool_calls"][0]["arguments"]) == args
    assert got["content"] == "Sure.Done." or got["content"].replace("\n", "") == "Sure.Done."


def test_pythonic_list_opens_the_answer_only() -> None:
    fmt = load_table().get("pythonic")
    got = assemble(route(fmt, ["See [1] for ", "details."]))
    assert got == {"content": "See [1] for details.", "reasoning_content": "", "tool_calls": []}
    got = assemble(route(fmt, ["[1, 2] are numbers."]))
    assert got["content"] == "[1, 2] are numbers." and not got["tool_calls"]
    got = assemble(route(fmt, ['[get_weather(city="Paris", days=3, ok=True, x=None)]']))
    assert json.loads(got["tool_calls"][0]["arguments"]) == {"city": "Paris", "days": 3, "ok": True,
                                                             "x": None}


@pytest.mark.parametrize(("template", "name"), [("qwen3_coder.jinja", "qwen3_coder"),
                                                ("glm45.jinja", "glm45"), ("harmony.jinja", "harmony"),
                                                ("pythonic.jinja", "pythonic")])
def test_syntax_detected_from_a_rendered_probe(template: str, name: str) -> None:
    assert detect_format((DATA / template).read_text(encoding="utf-8")).name == name


def test_real_templates_still_detect_their_syntax() -> None:
    models = Path(__file__).parents[1] / "models" / "data"
    for template, name in (("qwen3.jinja", "hermes"), ("qwen2.5.jinja", "hermes"),
                           ("llama3.2.jinja", "llama3_json"), ("mistral-v0.3.jinja", "mistral"),
                           ("mistral-small-3.2.jinja", "mistral_args"), ("gemma3.jinja", "hermes")):
        assert detect_format((models / template).read_text(encoding="utf-8")).name == name, template
