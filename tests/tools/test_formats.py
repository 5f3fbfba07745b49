"""The format table, format detection, and the tool grammars of every format and mode."""

from __future__ import annotations

import dataclasses

import pytest

from afm_struct.errors import InvalidRequestError
from afm_struct.tools import ToolDef, detect_format, load_table
from afm_struct.tools.formats import GRAMMARS_DIR, chat_template_of, template_knows_tools
from afm_struct.tools.grammar import close_objects, compile_tool_grammar, grammar_marker

QWEN = "{% if tools %}...<tools></tools>...<tool_call>\n{\"name\": ...}\n</tool_call>{% endif %}"
LLAMA = ("{%- if tools %}...Respond in the format {\"name\": function name, \"parameters\": "
         "dictionary of argument name and its value}...<|python_tag|>{% endif %}")
MISTRAL = "{%- if tools %}[AVAILABLE_TOOLS]...{%- endif %}[TOOL_CALLS][...]"

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
        "additionalProperties": False}
# "free" is non-strict with an open schema: guided by it, which here means any object.
TOOLS = (ToolDef("w", parameters=CITY, strict=True), ToolDef("free", parameters={"type": "object"}),
         ToolDef("none", strict=True))
GOOD = {
    "hermes": '<tool_call>\n{"name": "w", "arguments": {"city": "Paris"}}\n</tool_call>',
    "mistral": '[TOOL_CALLS][{"name": "w", "arguments": {"city": "Paris"}}]',
    "llama3_json": '{"name": "w", "parameters": {"city": "Paris"}}',
}
TWO = {
    "hermes": GOOD["hermes"] + '\n<tool_call>\n{"name": "none", "arguments": {}}\n</tool_call>',
    "mistral": ('[TOOL_CALLS][{"name": "w", "arguments": {"city": "Paris"}}, '
                '{"name": "none", "arguments": {}}]'),
    "llama3_json": GOOD["llama3_json"] + '; {"name": "none", "parameters": {}}',
}
BAD = {  # wrong argument type, unknown key, unknown tool
    "hermes": ['<tool_call>\n{"name": "w", "arguments": {"city": 1}}\n</tool_call>',
               '<tool_call>\n{"name": "w", "arguments": {"town": "Paris"}}\n</tool_call>',
               '<tool_call>\n{"name": "q", "arguments": {}}\n</tool_call>',
               '<tool_call>\n{"name": "none", "arguments": {"x": 1}}\n</tool_call>'],
    "mistral": ['[TOOL_CALLS][{"name": "w", "arguments": {"city": 1}}]',
                '[TOOL_CALLS][{"name": "q", "arguments": {}}]'],
    "llama3_json": ['{"name": "w", "parameters": {"city": 1}}', '{"name": "q", "parameters": {}}'],
}


def test_table_loads_with_the_three_formats() -> None:
    table = load_table()
    assert {f.name for f in table.formats} >= {"hermes", "llama3_json", "mistral"}
    assert table.default_format.name == "hermes"
    for fmt in table.formats:
        assert (GRAMMARS_DIR / fmt.grammar).exists()
        assert "{{CALL_RULES}}" in fmt.grammar_template()
    with pytest.raises(InvalidRequestError):
        table.get("nope")


@pytest.mark.parametrize(("template", "name"), [(QWEN, "hermes"), (LLAMA, "llama3_json"),
                                                (MISTRAL, "mistral"), ("plain", "hermes")])
def test_format_detected_from_the_chat_template(template: str, name: str) -> None:
    assert detect_format(template).name == name
    assert detect_format(template, name="mistral").name == "mistral"


def test_embedded_template_knows_no_tools(tokenizer) -> None:
    template = chat_template_of(tokenizer)
    assert template and not template_knows_tools(template)
    assert template_knows_tools(QWEN)


def test_markers_special_tokens_by_id(tokenizer) -> None:
    assert grammar_marker(tokenizer, "<|im_start|>") == "<[1]>"
    assert grammar_marker(tokenizer, "<tool_call>") == '"<tool_call>"'


@pytest.mark.parametrize("fmt_name", sorted(GOOD))
def test_required_grammar_accepts_exactly_valid_calls(tokenizer, fmt_name: str) -> None:
    fmt = load_table().get(fmt_name)
    many = compile_tool_grammar(tokenizer, fmt, TOOLS, required=True, parallel=True)
    assert not many.downgraded and many.rungs == {"w": "exact", "none": "exact"}
    assert many.guided == {"free": "exact"}
    one = compile_tool_grammar(tokenizer, fmt, TOOLS, required=True, parallel=False)
    c_many, c_one = many.constraint, one.constraint
    assert c_many is not None and c_one is not None
    assert c_many.validate(GOOD[fmt_name]).ok and c_one.validate(GOOD[fmt_name]).ok
    assert c_many.validate(TWO[fmt_name]).ok
    if fmt_name == "mistral":  # the space SentencePiece models put after the marker
        assert c_many.validate(GOOD[fmt_name].replace("[TOOL_CALLS][", "[TOOL_CALLS] [")).ok
    assert not c_one.validate(TWO[fmt_name]).ok  # parallel_tool_calls: false → one call
    assert not c_many.validate("Sure, here you go.").ok  # required: no free text
    for bad in BAD[fmt_name]:
        assert not c_many.validate(bad).ok, bad
    free = '{"name": "free", "arguments": {"any": [1, 2]}}'.replace(
        "arguments", fmt.arguments_key)
    wrapped = {"hermes": f"<tool_call>\n{free}\n</tool_call>", "mistral": f"[TOOL_CALLS][{free}]",
               "llama3_json": free}[fmt_name]
    assert c_many.validate(wrapped).ok  # non-strict, open schema: any object


@pytest.mark.parametrize("fmt_name", sorted(GOOD))
def test_auto_grammar_is_free_text_until_the_call_opens(tokenizer, fmt_name: str) -> None:
    fmt = load_table().get(fmt_name)
    auto = compile_tool_grammar(tokenizer, fmt, TOOLS, required=False, parallel=True).constraint
    assert auto is not None
    assert auto.validate("It is sunny today.").ok and auto.validate("\n It is sunny.").ok
    assert auto.validate(GOOD[fmt_name]).ok
    if fmt.open:  # text, then the call
        assert auto.validate("Let me check. " + GOOD[fmt_name]).ok
        assert not auto.validate("Let me check. " + BAD[fmt_name][0]).ok
    for bad in BAD[fmt_name]:
        assert not auto.validate(bad).ok, bad


def test_unenforceable_strict_tool_is_downgraded_with_a_reason(tokenizer) -> None:
    odd = ToolDef("odd", strict=True, parameters={
        "type": "object", "properties": {"a": {"oneOf": [{"type": "integer"},
                                                         {"type": "number", "multipleOf": 0.5}]}}})
    plan = compile_tool_grammar(tokenizer, load_table().get("hermes"), (*TOOLS, odd),
                                required=True, parallel=True)
    assert plan.downgraded and plan.reason and plan.reason.startswith("odd:")
    assert plan.rungs["odd"] != "exact" and plan.rungs["w"] == "exact"
    assert plan.constraint is not None and plan.constraint.validate(GOOD["hermes"]).ok


def test_string_arguments_format_is_generic_and_downgraded_when_strict(tokenizer) -> None:
    fmt = dataclasses.replace(load_table().get("hermes"), arguments="string")
    plan = compile_tool_grammar(tokenizer, fmt, TOOLS[:1], required=True, parallel=True)
    assert plan.downgraded and plan.reason == "w: arguments_as_string"
    assert plan.constraint is not None
    assert plan.constraint.validate(
        '<tool_call>\n{"name": "w", "arguments": "{\\"city\\": \\"P\\"}"}\n</tool_call>').ok


OPEN = {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "integer"}}},
                                         "m": {"type": "object", "additionalProperties": {"type": "string"}}}}


def test_close_objects_closes_declared_objects_only() -> None:
    closed = close_objects(OPEN)
    assert closed["additionalProperties"] is False
    assert closed["properties"]["a"]["additionalProperties"] is False
    assert closed["properties"]["m"] == OPEN["properties"]["m"]  # said what extras may be
    assert "additionalProperties" not in OPEN  # the caller's schema is untouched
    composed = {"allOf": [OPEN, {"properties": {"c": {"type": "string"}}}]}
    assert close_objects(composed) is composed  # closing could make allOf unsatisfiable


def test_strict_tool_objects_are_closed_unless_asked_not_to(tokenizer) -> None:
    fmt = load_table().get("hermes")
    tool = (ToolDef("o", parameters=OPEN, strict=True),)
    extra = '<tool_call>\n{"name": "o", "arguments": {"a": {"b": 1}, "zzz": 2}}\n</tool_call>'
    plain = '<tool_call>\n{"name": "o", "arguments": {"a": {"b": 1}}}\n</tool_call>'
    closed = compile_tool_grammar(tokenizer, fmt, tool, required=True, parallel=True).constraint
    opened = compile_tool_grammar(tokenizer, fmt, tool, required=True, parallel=True,
                                  closed=False).constraint
    assert closed is not None and opened is not None
    assert closed.validate(plain).ok and not closed.validate(extra).ok
    assert opened.validate(plain).ok and opened.validate(extra).ok


LOOSE = {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
         "required": ["city"]}


@pytest.mark.parametrize("fmt_name", sorted(GOOD))
def test_non_strict_arguments_follow_the_schema(tokenizer, fmt_name: str) -> None:
    """No ``strict`` flag: arguments are still guided by ``parameters`` (optional stays
    optional, undeclared keys are not invented), and nothing is reported downgraded."""
    fmt = load_table().get(fmt_name)
    tools = (ToolDef("get_weather", parameters=LOOSE),)

    def call(args: str) -> str:
        body = f'{{"name": "get_weather", "{fmt.arguments_key}": {args}}}'
        return {"hermes": f"<tool_call>\n{body}\n</tool_call>", "mistral": f"[TOOL_CALLS][{body}]",
                "llama3_json": body}[fmt_name]

    for auto in (False, True):
        planned = compile_tool_grammar(tokenizer, fmt, tools, required=not auto, parallel=False)
        assert not planned.downgraded and planned.rungs == {} and planned.guided == {"get_weather": "exact"}
        c = planned.constraint
        assert c is not None
        assert c.validate(call('{"city": "Paris"}')).ok  # "unit" stays optional
        assert c.validate(call('{"city": "Paris", "unit": "c"}')).ok
        for bad in ('{"temperature": ["Temperature", "Celsius"]}', '{"city": 3}',
                    '{"city": "Paris", "unit": "kelvin"}', '{"city": "Paris", "properties": {}}'):
            assert not c.validate(call(bad)).ok, bad
        if auto:
            assert c.validate("It is sunny.").ok


def test_objects_stay_open_where_the_schema_says_so(tokenizer) -> None:
    """An explicit ``additionalProperties`` keeps an object open (strict or not), and
    ``closed=False`` reads every schema as JSON Schema does."""
    fmt = load_table().get("hermes")
    extra = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "extra": 1}}\n</tool_call>'
    for strict in (False, True):
        tool = ToolDef("get_weather", parameters=LOOSE, strict=strict)
        planned = compile_tool_grammar(tokenizer, fmt, (tool,), required=True, parallel=False)
        assert planned.constraint is not None and not planned.constraint.validate(extra).ok
        open_schema = {**LOOSE, "additionalProperties": True}
        tool = ToolDef("get_weather", parameters=open_schema, strict=strict)
        opened = compile_tool_grammar(tokenizer, fmt, (tool,), required=True, parallel=False)
        assert opened.constraint is not None and opened.constraint.validate(extra).ok
    loose = compile_tool_grammar(tokenizer, fmt, (ToolDef("get_weather", parameters=LOOSE),), required=True,
                                 parallel=False, closed=False)
    assert loose.constraint is not None and loose.constraint.validate(extra).ok


def test_a_non_strict_schema_that_cannot_be_enforced_is_generic_without_downgrade(tokenizer) -> None:
    """A lookaround regex is beyond the engine: the strict tool is downgraded, the non-strict one
    falls back to generic object arguments quietly (the header concerns strict tools)."""
    odd = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^(?<!x)a+$"}},
           "required": ["code"]}
    fmt = load_table().get("hermes")
    loose = compile_tool_grammar(tokenizer, fmt, (ToolDef("f", parameters=odd),), required=True,
                                 parallel=False)
    assert not loose.downgraded and loose.reason is None and loose.guided["f"] != "exact"
    assert loose.constraint is not None
    zz = '<tool_call>\n{"name": "f", "arguments": {"code": "zz"}}\n</tool_call>'
    assert loose.constraint.validate(zz).ok
    strict = compile_tool_grammar(tokenizer, fmt, (ToolDef("f", parameters=odd, strict=True),),
                                  required=True, parallel=False)
    assert strict.downgraded and strict.reason and strict.reason.startswith("f:")
