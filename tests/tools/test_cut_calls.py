"""Calls cut anywhere by the end of generation: the calls or nothing, never their markup (issue 33).

The budget-aware closer feeds the shortest completion of a call; when the budget ends inside the
markup after the arguments (``</function>`` of Qwen3-Coder, ``</tool_call>``, the value's
``\\n</parameter>``), the call parsers gave that markup back: as content (``</``, ``</func``) or
as the end of a value (``"celsius\\n</para"``).  For every syntax of the format table, calls
written exactly as its grammar writes them are cut at every character and fed whole and a
character at a time: no content (the text holds nothing else), each call names a tool, and its
arguments parse and hold the values written so far (each a prefix of the one written).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from afm_struct.grammar.spec import ToolDef
from afm_struct.tools import ToolCallRouter, load_table
from afm_struct.tools.syntaxes import render_calls

FORMATS = load_table().formats
FORECAST = {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "days", "unit"], "additionalProperties": False}
TOOLS = (ToolDef("get_forecast", parameters=FORECAST, strict=True),
         ToolDef("ping", parameters={"type": "object", "properties": {}}, strict=True))
CALLS = [("get_forecast", {"city": "Paris", "days": 14, "unit": "celsius"}, FORECAST),
         ("ping", {}, TOOLS[1].parameters)]
WRITTEN = {name: args for name, args, _ in CALLS}


def route(fmt: Any, chunks: list[str]) -> tuple[str, list[tuple[str, str]]]:
    """(content, calls) of the router's events for ``chunks``, then the end of generation."""
    router = ToolCallRouter(fmt, tools=TOOLS)
    events = [e for chunk in chunks for e in router.feed(chunk)] + router.finish()
    content = "".join(getattr(e, "text", "") for e in events if type(e).__name__ == "Text")
    return content, [(c.name or "", c.arguments) for c in router.calls]


def held_values(name: str, arguments: str) -> None:
    """The arguments parse, and each value is the one written or a prefix of it (a value the
    cut ended: never with markup after it)."""
    args = json.loads(arguments)
    assert isinstance(args, dict), arguments
    for key, value in args.items():
        written = WRITTEN[name].get(key)
        if written is None:  # a JSON key the cut ended: closed with no value
            assert value is None and any(k.startswith(key) for k in WRITTEN[name]), (name, key, arguments)
            continue
        if value == written or value is None:
            continue
        whole = written if isinstance(written, str) else json.dumps(written)
        assert isinstance(value, str | int) and whole.startswith(str(value)), (name, key, arguments)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize("count", [1, 2])
def test_calls_cut_anywhere_leave_no_markup(fmt: Any, count: int) -> None:
    text = render_calls(fmt, CALLS[:count])
    for end in range(len(text) + 1):
        cut = text[:end]
        for chunks in ([cut], list(cut)):
            content, calls = route(fmt, chunks)
            # Before the first call is named, a lone "<" or "[" is as likely text, and so is a
            # bare JSON object (``{"na``: the answer itself?).  A budget cannot cut there
            # (admission refuses one shorter than a whole call).
            first = not calls and content == cut and (end == 1 or not fmt.open)
            assert not content or first, (fmt.name, cut, content)
            assert [n for n, _ in calls] == [n for n, _, _ in CALLS[:len(calls)]], (fmt.name, cut, calls)
            for name, arguments in calls:
                held_values(name, arguments)
    assert route(fmt, [text]) == ("", [(n, json.dumps(a)) for n, a, _ in CALLS[:count]]) or \
        [(n, json.loads(a)) for n, a in route(fmt, [text])[1]] == [(n, a) for n, a, _ in CALLS[:count]]
