"""The tool-call router's deltas, and agreement of the client assembler with the openai SDK."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

from afm_struct.client import StreamAssembler
from afm_struct.tools import ToolCallRouter, load_table

from .conftest import as_deltas, assemble, check_first_deltas
from .test_parser import CASES

HERMES = load_table().get("hermes")
TWO_CALLS = ('I will look both up.\n<tool_call>\n{"name": "get_weather", "arguments": '
             '{"city": "Paris", "unit": "celsius"}}\n</tool_call>\n<tool_call>\n'
             '{"name": "get_time", "arguments": {}}\n</tool_call>')


def route(text: str, cuts: list[int], **kwargs: Any) -> tuple[list[dict[str, Any]], ToolCallRouter]:
    router = ToolCallRouter(HERMES, **kwargs)
    deltas: list[dict[str, Any]] = []
    prev = 0
    for cut in [*cuts, len(text)]:
        deltas += as_deltas(router.feed(text[prev:cut]))
        prev = cut
    deltas += as_deltas(router.finish())
    return deltas, router


def random_cuts(text: str, seed: int) -> list[int]:
    rng = random.Random(seed)
    return sorted(rng.sample(range(1, len(text)), k=min(len(text) - 1, rng.randint(1, 40))))


@pytest.mark.parametrize("seed", range(25))
def test_names_and_arguments_split_anywhere(seed: int) -> None:
    deltas, router = route(TWO_CALLS, random_cuts(TWO_CALLS, seed))
    check_first_deltas(deltas)
    got = assemble(deltas)
    assert got["content"] == "I will look both up."
    assert [(c["name"], json.loads(c["arguments"])) for c in got["tool_calls"]] == [
        ("get_weather", {"city": "Paris", "unit": "celsius"}), ("get_time", {})]
    assert router.finish_reason("stop") == "tool_calls" and router.finish_reason("length") == "length"
    assert len({c["id"] for c in got["tool_calls"]}) == 2


def test_arguments_are_streamed_as_fragments_not_one_blob() -> None:
    deltas, _ = route(TWO_CALLS, list(range(1, len(TWO_CALLS))))  # one character at a time
    fragments = [f["function"]["arguments"] for d in deltas for f in d.get("tool_calls", ())
                 if f["index"] == 0 and "id" not in f]
    assert len(fragments) > 10 and "".join(fragments) == '{"city": "Paris", "unit": "celsius"}'


def test_text_only_finishes_with_stop() -> None:
    deltas, router = route("Just text, no tools.", [4, 9])
    assert assemble(deltas)["content"] == "Just text, no tools." and not assemble(deltas)["tool_calls"]
    assert router.finish_reason("stop") == "stop"


@pytest.mark.parametrize("seed", range(10))
def test_reasoning_then_content_and_then_a_call(seed: int) -> None:
    text = "<think>The user wants weather.</think>\n\nChecking." + TWO_CALLS[len("I will look both up."):]
    deltas, _ = route(text, random_cuts(text, seed), reasoning_tags=("<think>", "</think>"))
    got = assemble(deltas)
    assert got["reasoning_content"] == "The user wants weather."
    assert got["content"] == "Checking."
    assert [c["name"] for c in got["tool_calls"]] == ["get_weather", "get_time"]
    assert all("<think>" not in (d.get("content") or "") for d in deltas)


def test_reasoning_opened_by_the_prompt() -> None:
    text = "thinking...</think><tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"
    deltas, _ = route(text, [3, 15, 20], reasoning_tags=("<think>", "</think>"), start_in_reasoning=True)
    got = assemble(deltas)
    assert got["reasoning_content"] == "thinking..." and got["content"] == ""
    assert got["tool_calls"][0]["arguments"] == "{}"


def test_tool_choice_none_router_passes_text_without_markup() -> None:
    """No calls are parsed; the format's tags are still markup, never content."""
    deltas, router = route(TWO_CALLS, [10], detect_calls=False)
    bodies = [line for line in TWO_CALLS.splitlines() if line.startswith("{")]
    assert assemble(deltas)["content"] == "\n".join(["I will look both up.", *bodies])
    assert router.finish_reason("stop") == "stop"


def test_parallel_false_router_keeps_one_call() -> None:
    deltas, _ = route(TWO_CALLS, [30, 60], max_calls=1)
    assert [c["name"] for c in assemble(deltas)["tool_calls"]] == ["get_weather"]


# -- the client assembler and the openai SDK agree ------------------------------------------------

def chunks(deltas: list[dict[str, Any]], finish: str) -> list[dict[str, Any]]:
    base = {"id": "chatcmpl-t", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    out = [{**base, "choices": [{"index": 0, "delta": ({"role": "assistant"} if i == 0 else {}) | d,
                                 "finish_reason": None}]} for i, d in enumerate(deltas)]
    out.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    return out


def both_assemblers(deltas: list[dict[str, Any]], finish: str) -> tuple[Any, Any]:
    assembler = StreamAssembler()
    state = ChatCompletionStreamState()
    for c in chunks(deltas, finish):
        assembler.feed_data(json.dumps(c))
        state.handle_chunk(ChatCompletionChunk.model_validate(c))
    assembler.feed_data("[DONE]")
    ours = assembler.close()
    sdk = state.get_final_completion().choices[0]
    return ours, sdk


def assert_agree(deltas: list[dict[str, Any]], finish: str) -> None:
    ours, sdk = both_assemblers(deltas, finish)
    sdk_calls = sdk.message.tool_calls or []
    assert [c.to_dict() for c in ours.tool_calls] == [
        {"id": c.id, "type": c.type, "function": {"name": c.function.name,
                                                  "arguments": c.function.arguments}} for c in sdk_calls]
    assert (ours.content or None) == sdk.message.content
    assert ours.finish_reason == sdk.finish_reason == finish


@pytest.mark.parametrize("seed", range(8))
def test_assembler_and_sdk_agree_on_router_output(seed: int) -> None:
    deltas, router = route(TWO_CALLS, random_cuts(TWO_CALLS, seed))
    assert_agree(deltas, router.finish_reason("stop"))


def test_assembler_and_sdk_agree_on_interleaved_indices() -> None:
    deltas = [
        {"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                         "function": {"name": "get_weather", "arguments": '{"ci'}}]},
        {"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                         "function": {"name": "get_time", "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": 'ty": "Pa'}},
                        {"index": 1, "function": {"arguments": "{"}}]},
        {"tool_calls": [{"index": 1, "function": {"arguments": "}"}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": 'ris", "unit": "celsius"}'}}]},
    ]
    assert_agree(deltas, "tool_calls")
    ours, _ = both_assemblers(deltas, "tool_calls")
    assert [json.loads(c.arguments) for c in ours.tool_calls] == [
        {"city": "Paris", "unit": "celsius"}, {}]


def test_assembler_and_sdk_agree_with_content_around_calls() -> None:
    text = "Before. " + TWO_CALLS + " After."
    deltas, router = route(text, random_cuts(text, 99))
    assert_agree(deltas, router.finish_reason("stop"))


@pytest.mark.parametrize("case", range(len(CASES)))
def test_assembler_and_sdk_agree_on_every_parser_case(case: int) -> None:
    fmt_name, text, _ = CASES[case]
    router = ToolCallRouter(load_table().get(fmt_name))
    deltas: list[dict[str, Any]] = []
    for cut in range(0, len(text), 3):
        deltas += as_deltas(router.feed(text[cut:cut + 3]))
    deltas += as_deltas(router.finish())
    check_first_deltas(deltas)
    assert_agree(deltas, router.finish_reason("stop"))
