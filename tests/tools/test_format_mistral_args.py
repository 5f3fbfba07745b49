"""Mistral's newer call syntax, ``[TOOL_CALLS]name[ARGS]{...}`` (tokenizer v11+): table entry,
detection from the template, grammar, incremental parsing and history rendering."""

from __future__ import annotations

import copy
import json

import pytest

from afm_struct.tools import ToolDef, detect_format, load_table
from afm_struct.tools.formats import GRAMMARS_DIR, TABLE_FILE, parse_table
from afm_struct.tools.grammar import compile_tool_grammar
from afm_struct.tools.parser import ArgsEvent, CallEnd, CallParser, CallStart, TextEvent
from afm_struct.tools.prompt import render_call

SMALL_32 = ("{%- if tools %}[AVAILABLE_TOOLS]{{ tools|tojson }}[/AVAILABLE_TOOLS]{% endif %}"
            "{{- '[TOOL_CALLS]' + tool.function.name + '[ARGS]' + arguments }}")
V03 = "{%- if tools %}[AVAILABLE_TOOLS]...{%- endif %}[TOOL_CALLS] [{...}]"
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
        "additionalProperties": False}
TOOLS = (ToolDef("w", parameters=CITY, strict=True), ToolDef("none", strict=True))
GOOD = '[TOOL_CALLS]w[ARGS]{"city": "Paris"}'
TWO = GOOD + "[TOOL_CALLS]none[ARGS]{}"


def test_detected_before_the_older_mistral_form() -> None:
    assert detect_format(SMALL_32).name == "mistral_args"
    assert detect_format(V03).name == "mistral"
    fmt = load_table().get("mistral_args")
    assert (fmt.open, fmt.args_marker, fmt.body, fmt.close) == ("[TOOL_CALLS]", "[ARGS]", "name_args", "")


def test_table_rejects_an_args_marker_without_its_body() -> None:
    data = json.loads((GRAMMARS_DIR / TABLE_FILE).read_text(encoding="utf-8"))
    broken = copy.deepcopy(data)
    broken["formats"][0]["body"] = "object"
    with pytest.raises(ValueError, match="args_marker"):
        parse_table(broken)


def test_grammar_accepts_exactly_valid_calls(tokenizer) -> None:
    fmt = load_table().get("mistral_args")
    many = compile_tool_grammar(tokenizer, fmt, TOOLS, required=True, parallel=True)
    one = compile_tool_grammar(tokenizer, fmt, TOOLS, required=True, parallel=False)
    assert not many.downgraded and many.constraint is not None and one.constraint is not None
    assert many.constraint.validate(GOOD).ok and many.constraint.validate(TWO).ok
    assert one.constraint.validate(GOOD).ok and not one.constraint.validate(TWO).ok
    for bad in ('[TOOL_CALLS]w[ARGS]{"city": 1}', '[TOOL_CALLS]w[ARGS]{"town": "P"}',
                '[TOOL_CALLS]q[ARGS]{}', '[TOOL_CALLS][{"name": "w", "arguments": {"city": "P"}}]',
                "Sure."):
        assert not many.constraint.validate(bad).ok, bad
    auto = compile_tool_grammar(tokenizer, fmt, TOOLS, required=False, parallel=True).constraint
    assert auto is not None
    assert auto.validate("It is sunny.").ok and auto.validate("Let me check. " + GOOD).ok
    assert not auto.validate('Let me check. [TOOL_CALLS]w[ARGS]{"city": 1}').ok


def _events(text: str, step: int) -> list[object]:
    parser = CallParser(load_table().get("mistral_args"))
    out: list[object] = []
    for i in range(0, len(text), step):
        out += parser.feed(text[i:i + step])
    return out + parser.finish()


@pytest.mark.parametrize("step", [1, 2, 5, 1000])
def test_parser_reads_calls_in_any_chunking(step: int) -> None:
    events = _events("Checking." + TWO, step)
    assert "".join(e.text for e in events if isinstance(e, TextEvent)) == "Checking."
    assert [(e.index, e.name) for e in events if isinstance(e, CallStart)] == [(0, "w"), (1, "none")]
    args = {i: "".join(e.text for e in events if isinstance(e, ArgsEvent) and e.index == i) for i in (0, 1)}
    assert json.loads(args[0]) == {"city": "Paris"} and json.loads(args[1]) == {}
    assert [e.index for e in events if isinstance(e, CallEnd)] == [0, 1]


def test_parser_closes_a_call_cut_short_and_gives_back_a_stray_marker() -> None:
    cut = _events('[TOOL_CALLS]w[ARGS]{"city": "Par', 3)
    args = "".join(e.text for e in cut if isinstance(e, ArgsEvent))
    assert json.loads(args) == {"city": "Par"} and isinstance(cut[-1], CallEnd)
    stray = _events("[TOOL_CALLS] is a token\nok", 4)
    assert "".join(e.text for e in stray if isinstance(e, TextEvent)) == "[TOOL_CALLS] is a token\nok"


def test_history_call_is_written_in_the_same_syntax() -> None:
    fmt = load_table().get("mistral_args")
    assert render_call(fmt, "w", {"city": "Paris"}) == GOOD
