"""Hypothesis strategies for fuzz requests: everything a client may legitimately send.

Schemas come from the JSON Schema dev set (tests/dev_set.py: tests/grammar/data and the shared
JSONSchemaBench subset) or are generated (objects, arrays, enums, bounded strings and numbers,
``anyOf``); tools have one to three functions, with or without ``description`` and ``strict``;
``tool_choice`` is absent, none, auto, required or a named function; ``response_format`` is
absent, text, json_object or json_schema (strict or not); streams ask for usage or not;
logprobs with 0-5 alternatives; budgets 1-300; temperatures 0-2; stop strings; some turns carry
a tool-call history; some streams are cancelled after a few events.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from ..dev_set import dev_doc

WORDS = ("city", "name", "the", "value", "id", "Paris", "weather", "count", "items", "note", "a", "x")
TOOL_NAMES = ("get_weather", "create_event", "search", "lookup_user", "f")


@dataclass(frozen=True)
class FuzzCase:
    """One request: its body, and after how many stream events to cancel it (None: never)."""

    body: dict[str, Any]
    cancel_after: int | None = None


# The schema strategies below are made once (functools.cache): a strategy made inside a draw is
# validated again on every draw, and hypothesis's validation of a recursive strategy walks it
# whole; the same strategy object draws the same examples.
def _leaf() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.builds(
            lambda n: {"type": "string", **({"maxLength": n} if n else {})}, st.sampled_from([0, 3, 12])
        ),
        st.just({"type": "string", "format": "date"}),
        st.just({"type": "string", "pattern": "^[a-z]{2,5}$"}),
        st.builds(
            lambda lo, span: {"type": "integer", "minimum": lo, "maximum": lo + span},
            st.integers(-50, 50),
            st.integers(0, 1000),
        ),
        st.just({"type": "integer"}),
        st.just({"type": "number"}),
        st.just({"type": "boolean"}),
        st.just({"type": "null"}),
        st.builds(
            lambda vs: {"enum": vs},
            st.lists(st.sampled_from(["red", "green", 3, None, True]), min_size=1, max_size=3, unique=True),
        ),
    )


def _object(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    def build(props: dict[str, Any], required: list[bool], closed: bool) -> dict[str, Any]:
        schema: dict[str, Any] = {
            "type": "object",
            "properties": props,
            "required": [k for k, r in zip(props, required, strict=False) if r],
        }
        if closed:
            schema["additionalProperties"] = False
        return schema

    return st.builds(
        build,
        st.dictionaries(st.sampled_from(WORDS), children, min_size=0, max_size=4),
        st.lists(st.booleans(), min_size=4, max_size=4),
        st.booleans(),
    )


@functools.cache
def generated_schema() -> st.SearchStrategy[dict[str, Any]]:
    """A small random schema, nested up to a few levels."""
    return st.recursive(
        _leaf(),
        lambda children: st.one_of(
            _object(children),
            st.builds(
                lambda items, lo: {"type": "array", "items": items, "minItems": lo, "maxItems": lo + 2},
                children,
                st.integers(0, 2),
            ),
            st.builds(lambda a, b: {"anyOf": [a, b]}, children, children),
        ),
        max_leaves=6,
    )


@functools.cache
def object_schema() -> st.SearchStrategy[dict[str, Any]]:
    """A tool's parameters: a generated object, or a dev-set schema that is an object."""
    dev = (
        st.integers(0, 1 << 20)
        .map(lambda i: dev_doc(i)["schema"])
        .filter(lambda s: isinstance(s, dict) and s.get("type") == "object")
    )
    return st.one_of(_object(generated_schema()), dev)


@functools.cache
def any_schema() -> st.SearchStrategy[Any]:
    """A response schema: from the dev set or generated."""
    return st.one_of(st.integers(0, 1 << 20).map(lambda i: dev_doc(i)["schema"]), generated_schema())


def _sometimes(draw: st.DrawFn, one_in: int) -> bool:
    """True once in ``one_in`` draws; shrinks to False (a minimal case leaves the option out)."""
    return draw(st.integers(0, one_in - 1)) == one_in - 1


@st.composite
def tools(draw: st.DrawFn) -> list[dict[str, Any]]:
    """One to three function tools with distinct names."""
    names = draw(st.lists(st.sampled_from(TOOL_NAMES), min_size=1, max_size=3, unique=True))
    out = []
    for name in names:
        function: dict[str, Any] = {"name": name}
        if draw(st.booleans()):
            function["description"] = draw(st.sampled_from(["Look it up.", "Create one event.", ""]))
        if not _sometimes(draw, 6):
            function["parameters"] = draw(object_schema())
        strict = draw(st.sampled_from([None, True, False]))
        if strict is not None:
            function["strict"] = strict
        out.append({"type": "function", "function": function})
    return out


@st.composite
def messages(draw: st.DrawFn, tool_list: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """A user turn, maybe after a system turn and, with tools, a call and its result."""
    text = " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=12)))
    out: list[dict[str, Any]] = []
    if draw(st.booleans()):
        out.append({"role": "system", "content": "You are terse."})
    out.append({"role": "user", "content": text})
    if tool_list and _sometimes(draw, 4):
        name = tool_list[0]["function"]["name"]
        out += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": name, "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": '{"ok": true}'},
            {"role": "user", "content": "And now?"},
        ]
    return out


@st.composite
def fuzz_cases(draw: st.DrawFn) -> FuzzCase:
    """A whole request body, and when to cancel it."""
    body: dict[str, Any] = {
        "temperature": draw(st.sampled_from([0.0, 0.7, 1.0, 1.0, 1.5, 2.0])),
        "seed": draw(st.integers(0, 1 << 32)),
    }
    budget_field = draw(st.sampled_from(["max_tokens", "max_tokens", "max_completion_tokens"]))
    body[budget_field] = draw(st.one_of(st.integers(1, 40), st.integers(1, 300)))
    kind = draw(
        st.sampled_from(["text", "json_object", "json_schema", "json_schema", "tools", "tools", "tools"])
    )
    tool_list = draw(tools()) if kind == "tools" else None
    body["messages"] = draw(messages(tool_list))
    if tool_list:
        body["tools"] = tool_list
        choice = draw(st.sampled_from(["absent", "none", "auto", "required", "required", "named"]))
        if choice == "named":
            body["tool_choice"] = {
                "type": "function",
                "function": {"name": draw(st.sampled_from(tool_list))["function"]["name"]},
            }
        elif choice != "absent":
            body["tool_choice"] = choice
        parallel = draw(st.sampled_from([None, True, False]))
        if parallel is not None:
            body["parallel_tool_calls"] = parallel
    if kind == "json_object":
        body["response_format"] = {"type": "json_object"}
    elif kind == "json_schema":
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": "answer",
                "strict": draw(st.sampled_from([True, True, False])),
                "schema": draw(any_schema()),
            },
        }
    elif _sometimes(draw, 6):
        body["response_format"] = {"type": "text"}
    if _sometimes(draw, 6):
        body["stop"] = draw(st.sampled_from(["}", "\n", ["the", "a"]]))
    if _sometimes(draw, 5):
        body["logprobs"] = True
        if draw(st.booleans()):
            body["top_logprobs"] = draw(st.integers(0, 5))
    if _sometimes(draw, 7):
        body["afm_close_on_length"] = False
    if _sometimes(draw, 7):
        body["chat_template_kwargs"] = {"enable_thinking": False}
    body["stream"] = draw(st.booleans())
    cancel_after = None
    if body["stream"]:
        if draw(st.booleans()):
            body["stream_options"] = {"include_usage": True}
        if _sometimes(draw, 6):
            cancel_after = draw(st.integers(1, 8))
    return FuzzCase(body, cancel_after)
