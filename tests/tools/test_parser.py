"""The incremental call parser on well-formed, partial, malformed and interleaved text.

Every case is fed at several fragmentations (one character at a time, small runs, whole): the
events, merged, must not depend on where the text was split.
"""

from __future__ import annotations

import json

import pytest

from afm_struct.tools import ArgsEvent, CallEnd, CallParser, CallStart, TextEvent, load_table


def parse(fmt: str, text: str, step: int, **kwargs) -> list[tuple]:
    parser = CallParser(load_table().get(fmt), **kwargs)
    events = []
    for i in range(0, len(text), step):
        events += parser.feed(text[i:i + step])
    events += parser.finish()
    merged: list[tuple] = []
    for ev in events:
        if isinstance(ev, TextEvent):
            item = ("text", ev.text)
        elif isinstance(ev, CallStart):
            item = ("call", ev.index, ev.name)
        elif isinstance(ev, ArgsEvent):
            item = ("args", ev.index, ev.text)
        else:
            assert isinstance(ev, CallEnd)
            item = ("end", ev.index)
        if merged and merged[-1][0] == item[0] and item[0] in ("text", "args") \
                and merged[-1][:-1] == item[:-1]:
            merged[-1] = (*item[:-1], merged[-1][-1] + item[-1])
        else:
            merged.append(item)
    return merged


def call(i: int, name: str, args: str) -> list[tuple]:
    return [("call", i, name), ("args", i, args), ("end", i)]


CASES = [
    ("hermes", 'Checking.\n<tool_call>\n{"name": "w", "arguments": {"city": "Pa\\"ris"}}\n</tool_call>\n'
               '<tool_call>\n{"name": "t", "arguments": {}}\n</tool_call>',
     [("text", "Checking."), *call(0, "w", '{"city": "Pa\\"ris"}'), *call(1, "t", "{}")]),
    ("hermes", "no calls here, just <b>html</b> and a < sign",
     [("text", "no calls here, just <b>html</b> and a < sign")]),
    # a partial marker is held back, then given out as text when it does not complete; at the
    # end of generation it is a call opener the budget cut: markup, dropped (issue 33)
    ("hermes", "a <tool_cal> b <tool_ca", [("text", "a <tool_cal> b ")]),
    ("hermes", "a < b <", [("text", "a < b <")]),
    ("mistral", 'x [TOOL_CALL [TOOL_CALLS][{"name": "a", "arguments": {}}]',
     [("text", "x [TOOL_CALL"), *call(0, "a", "{}")]),
    # arguments before the name: held until the name is known
    ("hermes", '<tool_call>{"arguments": {"a": [1, {"b": "}"}]}, "name": "w"}</tool_call> after',
     [*call(0, "w", '{"a": [1, {"b": "}"}]}'), ("text", "after")]),
    # the close marker arrives inside the object: the arguments are closed for it
    ("hermes", '<tool_call>{"name": "w", "arguments": {"a": {"b": 1}</tool_call>',
     call(0, "w", '{"a": {"b": 1}}')),
    # arguments as a JSON string
    ("hermes", '<tool_call>{"name": "w", "arguments": "{\\"a\\": \\"\\u00e9\\\\n\\"}"}</tool_call>',
     call(0, "w", '{"a": "\\u00e9\\n"}'.replace("\\u00e9", "é"))),
    # no arguments at all, and the "parameters" alias
    ("hermes", '<tool_call>{"name": "t"}</tool_call><tool_call>{"name": "w", "parameters": {"x": 1}}'
               '</tool_call>', [*call(0, "t", "{}"), *call(1, "w", '{"x": 1}')]),
    # cut short by the end of generation
    ("hermes", '<tool_call>\n{"name": "w", "arguments": {"q": "unfinished',
     call(0, "w", '{"q": "unfinished"}')),
    # not a call: the block is given back as text
    ("hermes", "<tool_call> not json </tool_call> ok", [("text", "<tool_call> not json </tool_call> ok")]),
    ("hermes", "<tool_call>{name: 1}</tool_call> x", [("text", "<tool_call>{name: 1}</tool_call> x")]),
    # text between calls and extra keys
    ("hermes", 'A <tool_call>{"id": 7, "name": "a", "arguments": {}}</tool_call> B '
               '<tool_call>{"name": "b", "arguments": {"k": null}}</tool_call> C',
     [("text", "A"), *call(0, "a", "{}"), ("text", "B"), *call(1, "b", '{"k": null}'), ("text", "C")]),
    # markdown fences and a stray closing brace inside the block
    ("hermes", '<tool_call>\n```json\n{"name": "w", "arguments": {"a": 1}}}\n```\n</tool_call>\nDone.',
     [*call(0, "w", '{"a": 1}'), ("text", "Done.")]),
    ("mistral", 'ok [TOOL_CALLS][{"name": "a", "arguments": {"x": 1}}, '
                '{"name": "b", "arguments": {"y": true}}]',
     [("text", "ok"), *call(0, "a", '{"x": 1}'), *call(1, "b", '{"y": true}')]),
    ("llama3_json", ' {"name": "a", "parameters": {"x": 1.5e3}}; {"name": "b", "parameters": {"y": false}}',
     [*call(0, "a", '{"x": 1.5e3}'), *call(1, "b", '{"y": false}')]),
    ("llama3_json", 'The call would be {"name": "a"}', [("text", 'The call would be {"name": "a"}')]),
]


@pytest.mark.parametrize("step", [1, 2, 3, 7, 1000])
@pytest.mark.parametrize(("fmt", "text", "expected"), CASES)
def test_events_do_not_depend_on_fragmentation(fmt: str, text: str, expected: list, step: int) -> None:
    assert parse(fmt, text, step) == expected


def test_arguments_are_valid_json_even_when_cut_short() -> None:
    text = '<tool_call>{"name": "w", "arguments": {"a": [1, {"b": "x'
    events = parse("hermes", text, 1)
    assert json.loads(events[1][2]) == {"a": [1, {"b": "x"}]}


def test_max_calls_keeps_the_first_call_only() -> None:
    text = ('<tool_call>{"name": "a", "arguments": {}}</tool_call>'
            '<tool_call>{"name": "b", "arguments": {}}</tool_call>')
    assert parse("hermes", text, 2, max_calls=1) == call(0, "a", "{}")


def test_detection_off_passes_everything_as_text() -> None:
    text = '<tool_call>{"name": "a", "arguments": {}}</tool_call>'
    assert parse("hermes", text, 3, detect_calls=False) == [("text", text)]


def test_arguments_stream_while_generated() -> None:
    parser = CallParser(load_table().get("hermes"))
    assert parser.feed('<tool_call>{"name": "w", ') == [CallStart(0, "w")]
    assert parser.feed('"arguments": {"city"') == [ArgsEvent(0, '{"city"')]
    assert parser.feed(': "Pa') == [ArgsEvent(0, ': "Pa')]
    assert parser.feed('ris"}}</tool_') == [ArgsEvent(0, 'ris"}'), CallEnd(0)]
    assert parser.feed("call>") == [] and parser.finish() == []


@pytest.mark.parametrize("step", [1, 3, 100])
@pytest.mark.parametrize("tail", ['<tool_call>\n{"name": "final', "<tool_call>\n", "<tool_call>\n{"])
def test_a_call_cut_before_its_name_is_not_content(step, tail) -> None:
    """pydantic-ai's parallel second call cut by max_tokens: the half-opened call is markup, and
    markup never comes back as content (OpenAI never shows it)."""
    first = '<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>\n'
    assert parse("hermes", first + tail, step) == call(0, "a", "{}")
    assert parse("hermes", "Hi. " + tail, step) == [("text", "Hi.")]  # space before a call: dropped


@pytest.mark.parametrize("step", [1, 3, 100])
@pytest.mark.parametrize("cut", ["</", "</tool", "</tool_call", "\n</tool_"])
def test_a_close_marker_cut_by_the_budget_is_not_content(step, cut) -> None:
    """A call closed by budget-aware closing whose close tag the budget cut: the call stands,
    the cut tag is markup (it came back as an incomplete message '</tool_call')."""
    text = '<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n' + cut
    assert parse("hermes", text, step) == call(0, "a", '{"x": 1}')


def test_bare_json_cut_before_a_name_stays_text() -> None:
    """Formats without an opener: a cut ``{"na`` may be the answer itself, so it is given back."""
    assert parse("llama3_json", '{"na', 1) == [("text", '{"na')]
