"""The real embedded SmolLM2 with strict tools: arguments always validate when enforced.

SmolLM2's template knows no tools, so the definitions are written into the system prompt in
the default (Hermes) format; the grammar does the rest.  Greedy decoding, short budgets.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from afm_struct.decoding.generator import Finished, GenerationRequest, Generator, TextDelta
from afm_struct.decoding.sampling import SamplingParams
from afm_struct.tools import ToolPlan, plan_tools

from .conftest import TIME, WEATHER, as_deltas, assemble, check_first_deltas

pytestmark = pytest.mark.model

USER = [{"role": "user", "content": "What is the weather in Paris right now?"}]


def generate(embedded, plan: ToolPlan, max_tokens: int = 48) -> tuple[list[dict[str, Any]], str, str]:
    gen = Generator.from_loaded(embedded)
    router = plan.make_router()
    request = GenerationRequest(prompt_ids=plan.encode_prompt(embedded.tokenizer),
                                params=SamplingParams(max_tokens=max_tokens, temperature=0.0),
                                constraint=plan.constraint)
    deltas: list[dict[str, Any]] = []
    text, reason = "", ""
    for ev in gen.generate(request):
        if isinstance(ev, TextDelta):
            deltas += as_deltas(router.feed(ev.text))
        else:
            assert isinstance(ev, Finished)
            deltas += as_deltas(router.finish())
            text, reason = ev.text, router.finish_reason(ev.reason)
    return deltas, text, reason


def test_required_arguments_validate_streaming_and_assembled(embedded) -> None:
    plan = plan_tools(embedded.tokenizer, [WEATHER], "required", False, messages=USER)
    deltas, text, reason = generate(embedded, plan)
    check_first_deltas(deltas)
    (call,) = assemble(deltas)["tool_calls"]
    assert reason == "tool_calls" and call["name"] == "get_weather"
    jsonschema.validate(json.loads(call["arguments"]), WEATHER["function"]["parameters"])
    # non-streaming view: the router's own assembled calls say the same
    router = plan.make_router()
    router.feed(text)
    router.finish()
    assert [c.arguments for c in router.calls] == [call["arguments"]]


def test_named_function_is_called_with_valid_arguments(embedded) -> None:
    plan = plan_tools(embedded.tokenizer, [WEATHER, TIME],
                      {"type": "function", "function": {"name": "get_time"}}, False, messages=USER)
    deltas, _, reason = generate(embedded, plan, max_tokens=32)
    calls = assemble(deltas)["tool_calls"]
    assert reason == "tool_calls" and [c["name"] for c in calls] == ["get_time"]
    assert calls[0]["arguments"] == "{}"


def test_parallel_false_gives_exactly_one_call(embedded) -> None:
    plan = plan_tools(embedded.tokenizer, [WEATHER, TIME], "required", False, messages=USER)
    deltas, _, reason = generate(embedded, plan, max_tokens=64)
    calls = assemble(deltas)["tool_calls"]
    assert len(calls) == 1 and reason == "tool_calls"
    assert plan.validate_call(calls[0]["name"], calls[0]["arguments"]).ok


def test_multi_turn_loop_call_result_answer(embedded) -> None:
    """call → tool result → final answer, the history carried as openai SDK message objects."""
    from openai.types.chat import ChatCompletionMessage

    tok = embedded.tokenizer
    plan = plan_tools(tok, [WEATHER], "required", False, messages=USER)
    deltas, _, reason = generate(embedded, plan)
    (call,) = assemble(deltas)["tool_calls"]
    assert reason == "tool_calls"
    message = ChatCompletionMessage.model_validate({"role": "assistant", "content": None, "tool_calls": [
        {"id": call["id"], "type": "function",
         "function": {"name": call["name"], "arguments": call["arguments"]}}]})
    history = [*USER, message.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": call["id"], "content": '{"temp_c": 21, "sky": "clear"}'}]
    final_plan = plan_tools(tok, [WEATHER], "auto", messages=history)
    prompt = tok.decode(final_plan.encode_prompt(tok))
    assert "<tool_response>" in prompt and call["arguments"] in prompt
    deltas, _, reason = generate(embedded, final_plan, max_tokens=32)
    got = assemble(deltas)
    assert reason in ("stop", "length", "tool_calls")
    if reason != "tool_calls":  # a final answer in plain text
        assert got["content"].strip() and not got["tool_calls"]
    else:  # the model chose to call again: still a valid call
        assert final_plan.validate_call(got["tool_calls"][0]["name"], got["tool_calls"][0]["arguments"]).ok
