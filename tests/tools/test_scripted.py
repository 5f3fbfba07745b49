"""Tool plans through the real generator with a scripted model over the real tokenizer.

The scripted model says a known text; the plan's constraint masks every step and the router
turns the text into deltas, as the server will.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from afm_struct.decoding.generator import Finished, GenerationRequest, Generator, TextDelta
from afm_struct.decoding.reasoning_gate import ReasoningTags
from afm_struct.decoding.sampling import SamplingParams
from afm_struct.testing import scripted_loaded_model
from afm_struct.tools import ToolPlan, plan_tools

from .conftest import SEARCH, TIME, WEATHER, as_deltas, assemble, check_first_deltas

USER = [{"role": "user", "content": "Weather in Paris?"}]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'
TIME_CALL = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'


def run(tokenizer, plan: ToolPlan, script: str, *, reasoning: ReasoningTags | None = None,
        max_tokens: int = 200) -> tuple[list[dict[str, Any]], Finished, str]:
    gen = Generator.from_loaded(scripted_loaded_model(tokenizer, script))
    router = plan.make_router(reasoning_tags=(reasoning.open, reasoning.close) if reasoning else None,
                              start_in_reasoning=bool(reasoning and reasoning.opened_in_prompt))
    request = GenerationRequest(prompt_ids=plan.encode_prompt(tokenizer),
                                params=SamplingParams(max_tokens=max_tokens, temperature=0.0),
                                constraint=plan.constraint, reasoning=reasoning)
    deltas: list[dict[str, Any]] = []
    finished = None
    for ev in gen.generate(request):
        if isinstance(ev, TextDelta):
            deltas += as_deltas(router.feed(ev.text))
        else:
            finished = ev
            deltas += as_deltas(router.finish())
    assert isinstance(finished, Finished) and finished.reason != "error", finished
    return deltas, finished, router.finish_reason(finished.reason)


def test_required_strict_call_streams_and_validates(tokenizer) -> None:
    plan = plan_tools(tokenizer, [WEATHER, TIME], "required", messages=USER)
    assert plan.constraint is not None and not plan.downgraded
    deltas, fin, reason = run(tokenizer, plan, CALL)
    check_first_deltas(deltas)
    got = assemble(deltas)
    assert reason == "tool_calls" and fin.grammar_complete
    (call,) = got["tool_calls"]
    jsonschema.validate(json.loads(call["arguments"]), WEATHER["function"]["parameters"])
    assert sum(1 for d in deltas if "tool_calls" in d) > 3  # arguments arrive in pieces


def test_interleaved_text_and_several_calls_get_increasing_indices(tokenizer) -> None:
    plan = plan_tools(tokenizer, [WEATHER, TIME], "auto", messages=USER)
    script = "Let me check both.\n" + CALL + "\n" + TIME_CALL
    deltas, _, reason = run(tokenizer, plan, script)
    got = assemble(deltas)
    assert got["content"] == "Let me check both." and reason == "tool_calls"
    assert [c["name"] for c in got["tool_calls"]] == ["get_weather", "get_time"]
    assert got["tool_calls"][1]["arguments"] == "{}"
    indices = [f["index"] for d in deltas for f in d.get("tool_calls", ())]
    assert indices == sorted(indices) and set(indices) == {0, 1}


def test_auto_constrains_the_call_once_it_opens(tokenizer) -> None:
    plan = plan_tools(tokenizer, [WEATHER], "auto", False, messages=USER)
    bad = ('Sure. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "kelvin"}}'
           '\n</tool_call>')
    deltas, _, _ = run(tokenizer, plan, bad)
    got = assemble(deltas)
    (call,) = got["tool_calls"]  # the mask replaced the bad value: the arguments still validate
    jsonschema.validate(json.loads(call["arguments"]), WEATHER["function"]["parameters"])


def test_auto_allows_a_plain_answer(tokenizer) -> None:
    plan = plan_tools(tokenizer, [WEATHER], "auto", messages=USER)
    deltas, _, reason = run(tokenizer, plan, "It is sunny in Paris.")
    assert assemble(deltas)["content"] == "It is sunny in Paris." and reason == "stop"


def test_parallel_false_allows_exactly_one_call(tokenizer) -> None:
    plan = plan_tools(tokenizer, [WEATHER, TIME], "required", False, messages=USER)
    deltas, fin, reason = run(tokenizer, plan, CALL + "\n" + TIME_CALL)
    got = assemble(deltas)
    assert len(got["tool_calls"]) == 1 and reason == "tool_calls" and fin.grammar_complete


def test_named_function_forces_that_tool(tokenizer) -> None:
    plan = plan_tools(tokenizer, [WEATHER, TIME], {"type": "function", "function": {"name": "get_time"}},
                      messages=USER)
    deltas, _, _ = run(tokenizer, plan, CALL)  # the model wants weather; the grammar says time
    (call,) = assemble(deltas)["tool_calls"][:1]
    assert call["name"] == "get_time" and call["arguments"] == "{}"


def test_reasoning_then_tool_call(tokenizer) -> None:
    plan = plan_tools(tokenizer, [WEATHER], "required", messages=USER)
    tags = ReasoningTags("<think>", "</think>", opened_in_prompt=True)
    deltas, _, reason = run(tokenizer, plan, "The user asks about Paris.</think>\n" + CALL, reasoning=tags)
    got = assemble(deltas)
    assert got["reasoning_content"] == "The user asks about Paris." and got["content"] == ""
    assert got["tool_calls"][0]["name"] == "get_weather" and reason == "tool_calls"


def test_reasoning_then_content(tokenizer) -> None:
    plan = plan_tools(tokenizer, [WEATHER], "none", messages=USER)
    assert plan.constraint is None
    tags = ReasoningTags("◁think▷", "◁/think▷")
    deltas, _, reason = run(tokenizer, plan, "◁think▷No tool needed.◁/think▷\nHello!", reasoning=tags)
    got = assemble(deltas)
    assert got["reasoning_content"] == "No tool needed." and got["content"] == "Hello!"
    assert reason == "stop"


def test_non_strict_calls_in_messy_text(tokenizer) -> None:
    # Unconstrained (as with constrain_non_strict=False): the parser alone reads messy text.
    plan = plan_tools(tokenizer, [SEARCH], "auto", messages=USER, constrain_non_strict=False)
    assert plan.constraint is None
    script = ('Hmm <b>let me</b> search.\n<tool_call>\n{"arguments": {"query": "paris weather"}, '
              '"name": "search"}\n</tool_call> and <tool_call>oops</tool_call> then '
              '<tool_call>{"name": "search", "arguments": {"query": "lyon"</tool_call>')
    deltas, _, reason = run(tokenizer, plan, script)
    got = assemble(deltas)
    assert [json.loads(c["arguments"]) for c in got["tool_calls"]] == [
        {"query": "paris weather"}, {"query": "lyon"}]
    assert got["content"].startswith("Hmm <b>let me</b> search.") and "oops" in got["content"]
    assert reason == "tool_calls"


def test_tool_history_is_rendered_for_a_template_without_tools(tokenizer) -> None:
    history = [*USER, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'}]
    plan = plan_tools(tokenizer, [WEATHER], "auto", messages=history)
    assert plan.template_tools is None and plan.messages[0]["role"] == "system"
    assert "<tools>" in plan.messages[0]["content"] and "get_weather" in plan.messages[0]["content"]
    prompt = tokenizer.decode(plan.encode_prompt(tokenizer))
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}' in prompt
    assert '<tool_response>\n{"temp": 21}\n</tool_response>' in prompt


AGENTS_WEATHER = {"type": "function", "function": {  # as the OpenAI Agents SDK sends it: no strict
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "unit": {"type": "string", "enum": ["c", "f"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
WRONG_ARGS = '<tool_call>\n{"name": "get_weather", "arguments": {"temperature": ["Temperature", "Celsius"]}}'


def test_auto_non_strict_call_is_guided_once_opened(tokenizer) -> None:
    """The model opens a call and tries the wrong arguments (what the 135M model wrote for the
    Agents SDK): from the opener on, the mask keeps it to the declared schema."""
    plan = plan_tools(tokenizer, [AGENTS_WEATHER], "auto", messages=USER)
    assert plan.constraint is not None and not plan.downgraded
    deltas, _, reason = run(tokenizer, plan, "Let me check. " + WRONG_ARGS, max_tokens=60)
    got = assemble(deltas)
    assert got["content"].startswith("Let me check.") and reason == "tool_calls"
    (call,) = got["tool_calls"]
    jsonschema.validate(json.loads(call["arguments"]), AGENTS_WEATHER["function"]["parameters"])
