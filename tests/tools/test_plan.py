"""plan_tools decisions: which requests are constrained, what is rendered, which errors."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from afm_struct.errors import InvalidRequestError, UnknownToolError
from afm_struct.tools import plan_tools

from .conftest import SEARCH, TIME, WEATHER

USER = [{"role": "user", "content": "hi"}]


def test_none_is_unconstrained_and_detects_no_calls(tokenizer) -> None:
    plan = plan_tools(tokenizer, [WEATHER], "none", messages=USER)
    assert plan.constraint is None and plan.callable_tools == ()
    assert plan.messages == USER  # no tool block in the prompt
    assert not plan.make_router().parser.detect_calls


def test_auto_with_only_non_strict_tools_is_guided_once_the_call_opens(tokenizer) -> None:
    plan = plan_tools(tokenizer, [SEARCH], "auto", messages=USER)
    assert plan.constraint is not None and not plan.downgraded and plan.rungs == {}
    assert plan.guided == {"search": "exact"} and "<tools>" in plan.messages[0]["content"]
    assert plan.constraint.validate("No call needed.").ok
    assert not plan.constraint.validate('<tool_call>\n{"name": "search", "arguments": {"q": 1}}').ok
    free = plan_tools(tokenizer, [SEARCH], "auto", messages=USER, constrain_non_strict=False)
    assert free.constraint is None  # the benchmark's unconstrained baseline


def test_required_non_strict_constrains_structure_unless_asked_not_to(tokenizer) -> None:
    plan = plan_tools(tokenizer, [SEARCH], "required", messages=USER)
    assert plan.constraint is not None and not plan.downgraded and plan.rungs == {}
    assert plan_tools(tokenizer, [SEARCH], "required", messages=USER,
                      constrain_non_strict=False).constraint is None


def test_named_choice_limits_the_grammar_to_that_tool(tokenizer) -> None:
    plan = plan_tools(tokenizer, [WEATHER, TIME], {"type": "function", "function": {"name": "get_time"}},
                      messages=USER)
    assert [t.name for t in plan.callable_tools] == ["get_time"]
    assert plan.grammar is not None and "get_weather" not in plan.grammar
    assert "You must call the function get_time." in plan.messages[0]["content"]


def test_named_choice_is_one_call(tokenizer) -> None:
    """``tool_choice`` naming a function: exactly one call, whatever parallel_tool_calls says."""
    one = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
    for parallel in (None, True):
        plan = plan_tools(tokenizer, [WEATHER, TIME], {"type": "function", "function": {"name": "get_time"}},
                          parallel, messages=USER)
        assert not plan.parallel and plan.constraint is not None
        assert plan.constraint.validate(one).ok and not plan.constraint.validate(one + "\n" + one).ok
    assert plan_tools(tokenizer, [WEATHER, TIME], "required", messages=USER).parallel


def test_parallel_false_grammar_and_router(tokenizer) -> None:
    plan = plan_tools(tokenizer, [WEATHER], "required", False, messages=USER)
    assert plan.grammar is not None and "start: required_one" in plan.grammar
    assert plan.make_router().parser.max_calls == 1


@pytest.mark.parametrize(("choice", "error"), [
    ("sometimes", InvalidRequestError),
    ({"type": "function", "function": {"name": "nope"}}, UnknownToolError),
    ({"type": "function"}, InvalidRequestError),
])
def test_bad_tool_choice_is_a_400(tokenizer, choice: Any, error: type) -> None:
    with pytest.raises(error):
        plan_tools(tokenizer, [WEATHER], choice, messages=USER)


def test_bad_tools_are_400s(tokenizer) -> None:
    with pytest.raises(InvalidRequestError):
        plan_tools(tokenizer, [WEATHER, WEATHER], "auto", messages=USER)
    with pytest.raises(InvalidRequestError):
        plan_tools(tokenizer, [{"type": "function", "function": {"name": ""}}], "auto", messages=USER)
    with pytest.raises(InvalidRequestError):
        plan_tools(tokenizer, [], "required", messages=USER)


def test_attribute_style_request_objects_are_accepted(tokenizer) -> None:
    fn = SimpleNamespace(name="get_time", description="t", parameters=None, strict=True)
    tool = SimpleNamespace(type="function", function=fn)
    choice = SimpleNamespace(type="function", function=SimpleNamespace(name="get_time"))
    plan = plan_tools(tokenizer, [tool], choice, messages=USER)
    assert plan.constraint is not None and plan.tools[0].strict
    assert plan.validate_call("get_time", "{}").ok and not plan.validate_call("get_time", '{"x": 1}').ok


def test_template_with_tools_gets_them_and_object_arguments(tokenizer) -> None:
    qwen = "{% if tools %}<tool_call>{% endif %}"
    history = [*USER, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "noon"}]
    plan = plan_tools(tokenizer, [WEATHER, TIME], "auto", messages=history, chat_template=qwen)
    assert plan.format.name == "hermes" and plan.template_tools is not None
    assert [t["function"]["name"] for t in plan.template_tools] == ["get_weather", "get_time"]
    assert plan.messages[1]["tool_calls"][0]["function"]["arguments"] == {}
    assert plan.messages[2] == history[2]
    mistral = "{% if tools %}[AVAILABLE_TOOLS]{% endif %}[TOOL_CALLS]"
    plan = plan_tools(tokenizer, [WEATHER], "required", messages=USER, chat_template=mistral)
    assert plan.format.name == "mistral" and plan.grammar is not None and "[TOOL_CALLS]" in plan.grammar


def test_compile_hook_is_used_for_every_compile(tokenizer) -> None:
    from afm_struct.grammar.compiler import compile_constraint

    kinds: list[str] = []

    def hook(tok: Any, request: Any) -> Any:
        kinds.append(request.kind)
        return compile_constraint(tok, request)

    plan = plan_tools(tokenizer, [WEATHER, TIME, SEARCH], "required", messages=USER, compile_fn=hook)
    # Every tool's parameters (strict or not) climbs the ladder, then the assembled grammar.
    assert kinds == ["json_schema", "json_schema", "json_schema", "lark"] and plan.constraint is not None
