"""The contract checker catches what it is meant to: each invariant on a response that breaks it."""

from __future__ import annotations

import json
from typing import Any

from .contract import check

SSE = {
    "content-type": "text/event-stream",
    "cache-control": "no-cache",
    "x-accel-buffering": "no",
    "x-request-id": "r",
    "openai-request-id": "r",
}
IDS = {"x-request-id": "r", "openai-request-id": "r"}
SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}},
    "required": ["a"],
    "additionalProperties": False,
}
TOOLS = [{"type": "function", "function": {"name": "f", "strict": True, "parameters": SCHEMA}}]
MARKUP = ("<|im_start|>", "<think>", "<tool_call>")


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> str:
    return json.dumps(
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}],
            **extra,
        }
    )


USAGE = json.dumps(
    {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
)


def invariants(
    body: dict[str, Any], payloads: list[str], headers: dict[str, str] = SSE, **kw: Any
) -> set[str]:
    return {
        v.invariant for v in check({"stream": True, **body}, MARKUP, 200, headers, payloads=payloads, **kw)
    }


def completion(content: str | None, finish: str = "stop", calls: Any = None) -> dict[str, Any]:
    message = {"role": "assistant", "content": content, **({"tool_calls": calls} if calls else {})}
    return {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }


def test_a_good_stream_has_no_violation() -> None:
    good = [chunk({"role": "assistant", "content": "hi"}), chunk(finish="stop"), USAGE, "[DONE]"]
    assert invariants({"stream_options": {"include_usage": True}}, good) == set()


def test_each_stream_invariant_is_caught() -> None:
    first = chunk({"role": "assistant", "content": "hi"})
    assert invariants({}, [first, chunk(finish="stop")]) == {"framing"}  # no [DONE]
    assert "finish" in invariants({}, [first, chunk(finish="stop"), chunk(finish="stop"), "[DONE]"])
    assert invariants({}, [chunk({"content": "hi"}), chunk(finish="stop"), "[DONE]"]) == {"role"}
    assert invariants(
        {"stream_options": {"include_usage": True}}, [first, chunk(finish="stop"), "[DONE]"]
    ) == {"usage"}
    assert invariants(
        {}, [chunk({"role": "assistant", "content": "a<|im_start|>"}), chunk(finish="stop"), "[DONE]"]
    ) == {"markup"}
    assert invariants(
        {}, [chunk({"role": "assistant", "reasoning_content": "r<think>"}), chunk(finish="stop"), "[DONE]"]
    ) == {"markup"}
    assert "channels" in invariants(
        {},
        [
            chunk({"role": "assistant", "content": "a", "reasoning_content": "r"}),
            chunk(finish="stop"),
            "[DONE]",
        ],
    )
    assert invariants({}, [first, chunk(finish="stop"), "[DONE]"], cancelled=True) == {"cancel"}
    error = chunk({"content": "[error] x"}, "error", error={"message": "x", "code": "generation_failed"})
    assert {"error_chunk", "finish"} <= invariants({}, [first, error, "[DONE]"])
    assert "headers" in invariants({}, [first, chunk(finish="stop"), "[DONE]"], headers=IDS)


def test_tool_call_deltas_are_checked_by_index() -> None:
    body = {"tools": TOOLS, "tool_choice": "required"}
    start = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}
    good = [
        chunk({"role": "assistant", "tool_calls": [start]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a": 1}'}}]}),
        chunk(finish="tool_calls"),
        "[DONE]",
    ]
    assert invariants(body, good) == set()
    renamed = [
        *good[:1],
        chunk({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": '{"a": 1}'}}]}),
        *good[2:],
    ]
    assert invariants(body, renamed) == {"tool_deltas"}
    skipped = [chunk({"role": "assistant", "tool_calls": [{**start, "index": 1}]}), *good[1:]]
    assert "tool_deltas" in invariants(body, skipped)
    invalid = [
        *good[:1],
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a": "x"}'}}]}),
        *good[2:],
    ]
    assert invariants(body, invalid) == {"tools"}
    assert invariants(
        body, [chunk({"role": "assistant", "content": ""}), chunk(finish="stop"), "[DONE]"]
    ) == {"tools"}


def test_completion_invariants() -> None:
    fmt = {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "s", "strict": True, "schema": SCHEMA},
        }
    }

    def found(
        body: dict[str, Any], payload: Any, status: int = 200, headers: dict[str, str] = IDS
    ) -> set[str]:
        return {v.invariant for v in check(body, MARKUP, status, headers, json_body=payload)}

    assert found(fmt, completion('{"a": 1}')) == set()
    assert found(fmt, completion('{"a": 1', "length")) == {"strict"}
    assert (
        found(fmt, completion('{"a": 1', "length"), headers={**IDS, "x-grammar-constraints": "downgraded"})
        == set()
    )
    assert found({"response_format": {"type": "json_object"}}, completion("[1]")) == {"strict"}
    call = {"id": "call_1", "type": "function", "function": {"name": "g", "arguments": "{}"}}
    assert found({"tools": TOOLS}, completion(None, "tool_calls", [call])) == {"tools"}
    assert found(
        {}, {"error": {"message": "boom", "type": "server_error", "param": None, "code": None}}, 500
    ) == {"status"}
    refused = {
        "error": {
            "message": "m",
            "type": "invalid_request_error",
            "param": "max_tokens",
            "code": "max_tokens_too_small",
        }
    }
    assert found({}, refused, 400) == set()
    assert found({"max_tokens": 1}, completion("ab")) == {"usage"}  # 2 completion tokens over a budget of 1
    assert found({"logprobs": True}, completion("a")) == {"logprobs"}


def test_a_marker_cut_at_the_end_is_caught() -> None:
    def ends(delta: dict[str, Any], body: dict[str, Any] | None = None) -> set[str]:
        payloads = [chunk({"role": "assistant", **delta}), chunk(finish="length"), "[DONE]"]
        return invariants(body or {}, payloads)

    assert ends({"content": "text <|"}) == {"partial_markup"}
    assert ends({"content": "text <tool_"}) == {"partial_markup"}
    assert ends({"content": "a <|im_st"}) == {"partial_markup"}
    assert ends({"reasoning_content": "r <th"}) == {"partial_markup"}
    # Ordinary text: a lone '<', a marker's piece that the text goes on after, a whole word.
    assert ends({"content": "1 < 2 and 3 <"}) == set()
    assert ends({"content": "<tool_ x"}) == set()
    assert ends({"content": "think"}) == set()
    # A marker's piece in the content of a required call is also text outside the calls.
    required = {"tools": TOOLS, "tool_choice": "required"}
    assert "tools" in ends({"content": "<"}, required)
