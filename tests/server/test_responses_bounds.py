"""Every string a Responses request makes the server keep, over real HTTP on the scripted model
with a SQLite store: one over its bound is a 400 naming it before the request runs (nothing is
stored), one at its bound is served and stored; unknown keys in items, parts, tool formats and
tool_choice objects are refused by name; the server's own output passes back as input."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from afm_struct.store import open_store
from afm_struct.testing import scripted_loaded_model
from server.live import LiveServer, start_server
from server.responses.bounds import (
    MAX_DESCRIPTION,
    MAX_FORMAT_BYTES,
    MAX_ID,
    MAX_PART_EXTRAS_BYTES,
    MAX_PASSED_BACK_OUTPUT,
    MAX_PROMPT_CACHE_KEY,
    MAX_SAFETY_IDENTIFIER,
    MAX_STATUS,
    MAX_SUMMARY,
    MAX_TOOL_NAME,
    MAX_TOOLS_BYTES,
    MAX_USER,
)
from server.settings import ServerSettings

from .responses_client import post

SCHEMA = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"],
          "additionalProperties": False}


@pytest.fixture
def live(tokenizer: Any, tmp_path: Path) -> Iterator[LiveServer]:
    server = start_server(scripted_loaded_model(tokenizer, "Hello there"), ServerSettings(),
                          response_store=open_store(tmp_path / "r.sqlite3"))
    yield server
    server.stop()


def _tool(**fields: Any) -> dict[str, Any]:
    return {"type": "function", "name": "f", "parameters": SCHEMA, **fields}


def _call(**fields: Any) -> dict[str, Any]:
    return {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", **fields}


def _output(**fields: Any) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": "c1", "output": "ok", **fields}


def _user(**fields: Any) -> dict[str, Any]:
    return {"role": "user", "content": "hi", **fields}


def _custom_call(text: str) -> dict[str, Any]:
    return {"type": "custom_tool_call", "call_id": "c1", "name": "g", "input": text}


def _custom_output() -> dict[str, Any]:
    return {"type": "custom_tool_call_output", "call_id": "c1", "output": "ok"}


def _reasoning(texts: list[str]) -> dict[str, Any]:
    return {"type": "reasoning", "summary": [{"type": "summary_text", "text": t} for t in texts],
            "content": [{"type": "reasoning_text", "text": "hm"}]}


def _format(description: str) -> dict[str, Any]:
    return {"format": {"type": "json_schema", "name": "x", "schema": SCHEMA, "description": description}}


# (the request at the bound, the request one past it, the param named) for each bounded string.
def _cases() -> list[tuple[dict[str, Any], dict[str, Any], str]]:
    def both(make: Any, limit: int, param: str) -> tuple[dict[str, Any], dict[str, Any], str]:
        return make("x" * limit), make("x" * (limit + 1)), param

    return [
        both(lambda s: {"input": "hi", "user": s}, MAX_USER, "user"),
        both(lambda s: {"input": "hi", "safety_identifier": s}, MAX_SAFETY_IDENTIFIER, "safety_identifier"),
        both(lambda s: {"input": "hi", "prompt_cache_key": s}, MAX_PROMPT_CACHE_KEY, "prompt_cache_key"),
        both(lambda s: {"input": "hi", "text": _format(s)}, MAX_DESCRIPTION, "text.format.description"),
        both(lambda s: {"input": "hi", "tools": [_tool(description=s)], "tool_choice": "none"},
             MAX_DESCRIPTION, "tools.0.description"),
        both(lambda s: {"input": "hi", "tools": [{"type": "custom", "name": "g", "description": s}],
                        "tool_choice": "none"}, MAX_DESCRIPTION, "tools.0.description"),
        both(lambda s: {"input": "hi", "tools": [_tool(name=s)]}, MAX_TOOL_NAME, "tools.0.name"),
        both(lambda s: {"input": [_user(id=s)]}, MAX_ID, "input.0.id"),
        both(lambda s: {"input": [_user(), _call(id=s), _output()]}, MAX_ID, "input.1.id"),
        both(lambda s: {"input": [_user(), _call(name=s), _output()]}, MAX_TOOL_NAME, "input.1.name"),
        both(lambda s: {"input": [_user(), _call(arguments=s), _output()]}, MAX_PASSED_BACK_OUTPUT,
             "input.1.arguments"),
        both(lambda s: {"input": [_user(), _custom_call(s), _custom_output()]}, MAX_PASSED_BACK_OUTPUT,
             "input.1.input"),
        both(lambda s: {"input": [_user(), _call(call_id=s), _output(call_id=s)]}, MAX_ID, "input.1.call_id"),
        both(lambda s: {"input": [_user(), _call(), _output(status=s)]}, MAX_STATUS, "input.2.status"),
        both(lambda s: {"input": [_user(), _reasoning([s])]}, MAX_SUMMARY, "input.1.summary.0.text"),
        both(lambda s: {"input": [_user(), _reasoning([s[:MAX_SUMMARY // 2], s[MAX_SUMMARY // 2:]])]},
             MAX_SUMMARY, "input.1.summary"),
    ]


@pytest.mark.parametrize(("fine", "over", "param"), _cases(),
                         ids=[f"{c[2]}-{i}" for i, c in enumerate(_cases())])
def test_a_string_over_its_bound_is_a_400_naming_it_and_at_it_is_kept(
        live: LiveServer, fine: dict[str, Any], over: dict[str, Any], param: str) -> None:
    r = post(live.url, over)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["param"], error["code"]) == (param, "string_above_max_length")
    assert "at most" in error["message"] and len(error["message"]) < 300  # the value is not echoed
    ok = post(live.url, fine)
    assert ok.status_code == 200, ok.text
    assert httpx.get(f"{live.url}/v1/responses/{ok.json()['id']}").json() == ok.json()


def test_a_long_previous_response_id_is_refused_before_its_lookup(live: LiveServer) -> None:
    r = post(live.url, {"input": "hi", "previous_response_id": "resp_" + "x" * MAX_ID})
    assert r.status_code == 400 and r.json()["error"]["param"] == "previous_response_id"
    assert len(r.text) < 500
    r = post(live.url, {"input": "hi", "previous_response_id": "resp_" + "x" * (MAX_ID - 5)})
    assert r.status_code == 404 and r.json()["error"]["param"] == "previous_response_id"


@pytest.mark.parametrize(("body", "param"), [
    ({"input": [_user(junk="x")]}, "input.0.junk"),
    ({"input": [{"role": "user", "content": [{"type": "input_text", "text": "hi", "junk": 1}]}]},
     "input.0.content.0.junk"),
    ({"input": [_user(), {"role": "assistant", "content": [{"type": "refusal", "refusal": "no", "x": 1}]}]},
     "input.1.content.0.x"),
    ({"input": [_user(), _call(extra={"a": 1}), _output()]}, "input.1.extra"),
    ({"input": [_user(), _call(), _output(junk="x")]}, "input.2.junk"),
    ({"input": [_user(), {**_reasoning(["a"]), "junk": 1}]}, "input.1.junk"),
    ({"input": [_user(), {"type": "reasoning", "summary": [{"type": "summary_text", "text": "a", "x": 1}]}]},
     "input.1.summary.0.x"),
    ({"input": "hi", "tools": [{"type": "custom", "name": "g", "format": {"type": "text", "junk": "x"}}]},
     "tools.0.format.junk"),
    ({"input": "hi", "tools": [_tool()], "tool_choice": {"type": "function", "name": "f", "junk": 1}},
     "tool_choice.junk"),
    ({"input": "hi", "tools": [_tool()],
      "tool_choice": {"type": "allowed_tools", "tools": [{"type": "function", "name": "f", "junk": 1}]}},
     "tool_choice.tools.0.junk"),
])
def test_unknown_keys_that_would_be_stored_are_refused_by_name(live: LiveServer, body: dict[str, Any],
                                                               param: str) -> None:
    r = post(live.url, body)
    assert r.status_code == 400, r.text
    assert (r.json()["error"]["param"], r.json()["error"]["code"]) == (param, "unknown_parameter")


@pytest.mark.parametrize(("body", "param"), [
    ({"input": [_user(), {"role": "assistant", "content": [
        {"type": "output_text", "text": "a", "annotations": "x"}]}]}, "input.1.content.0.annotations"),
    ({"input": [_user(), {"type": "reasoning", "summary": "long text"}]}, "input.1.summary"),
    ({"input": [_user(id=5)]}, "input.0.id"),
    ({"input": "hi", "user": 7}, "user"),
])
def test_wrong_types_in_stored_fields_are_400s(live: LiveServer, body: dict[str, Any], param: str) -> None:
    r = post(live.url, body)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_the_servers_own_output_passes_back_as_input(live: LiveServer) -> None:
    first = post(live.url, {"input": "hi", "include": ["message.output_text.logprobs"], "top_logprobs": 2,
                            "tools": [_tool()], "tool_choice": "none"}).json()
    assert first["output"][0]["content"][0]["logprobs"]
    passed = [{"role": "user", "content": "hi", "type": "message"}, *first["output"],
              {"type": "reasoning", "id": "rs_1", "status": "completed", "summary": [],
               "content": [{"type": "reasoning_text", "text": "hm"}]},
              _call(id="fc_1", status="completed"), _output(id="fco_1", status="completed"),
              {"role": "user", "content": [{"type": "input_text", "text": "again"}]}]
    second = post(live.url, {"input": passed, "tools": [_tool()], "tool_choice": "none"})
    assert second.status_code == 200, second.text
    items = httpx.get(f"{live.url}/v1/responses/{second.json()['id']}/input_items",
                      params={"order": "asc", "limit": 100}).json()["data"]
    assert [i["type"] for i in items] == ["message", "message", "reasoning", "function_call",
                                          "function_call_output", "message"]
    assert items[1] == first["output"][0]  # kept as given, logprobs and all


def test_tools_and_the_text_format_are_bounded_whole(live: LiveServer) -> None:
    # 128 tools of 4 KB descriptions (a big real tool set) are served and kept, with tool_choice
    # none too, where they never reach the prompt.
    many = [_tool(name=f"f{n}", description="d" * 4096) for n in range(128)]
    ok = post(live.url, {"input": "hi", "tools": many, "tool_choice": "none"})
    assert ok.status_code == 200, ok.text
    assert len(httpx.get(f"{live.url}/v1/responses/{ok.json()['id']}").content) < MAX_TOOLS_BYTES
    # The same count with a schema carrying a megabyte of annotations is refused whole.
    padded = {**SCHEMA, "description": "p" * 10_000}
    heavy = [_tool(name=f"f{n}", description="d" * 4096, parameters=padded) for n in range(128)]
    r = post(live.url, {"input": "hi", "tools": heavy, "tool_choice": "none"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools", r.text
    assert r.json()["error"]["code"] == "request_too_large"
    schema = {**SCHEMA, "description": "p" * MAX_FORMAT_BYTES}
    fmt = {"type": "json_schema", "name": "x", "schema": schema}
    r = post(live.url, {"input": "hi", "text": {"format": fmt}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "text.format", r.text


def test_reasoning_text_the_template_may_drop_is_bounded_together(live: LiveServer) -> None:
    """SmolLM2's template drops earlier reasoning and calls: no context bounds them."""
    def thinking(text: str) -> dict[str, Any]:
        return {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": text}]}

    half = MAX_PASSED_BACK_OUTPUT // 2
    turns = [_user(), thinking("t" * half), {"role": "assistant", "content": "a"}, _user(),
             thinking("u" * half), {"role": "assistant", "content": "b"}, _user()]
    ok = post(live.url, {"input": turns})  # SmolLM2's template drops earlier turns' reasoning
    assert ok.status_code == 200, ok.text[:300]
    turns[4] = thinking("u" * (half + 1))
    r = post(live.url, {"input": turns})
    assert r.status_code == 400, r.text[:300]
    error = r.json()["error"]
    assert (error["param"], error["code"]) == ("input.4.content.0.text", "string_above_max_length")


def test_passed_back_logprobs_and_annotations_are_bounded_together(live: LiveServer) -> None:
    entry = {"token": "x", "logprob": -0.5, "bytes": [120], "top_logprobs": []}
    count = MAX_PART_EXTRAS_BYTES // len(str(entry).replace(" ", "")) // 2
    answer = {"role": "assistant", "content": [{"type": "output_text", "text": "a", "annotations": [],
                                                "logprobs": [entry] * count}]}
    ok = post(live.url, {"input": [_user(), answer, _user()]})
    assert ok.status_code == 200, ok.text[:300]
    r = post(live.url, {"input": [_user(), answer, _user(), answer, _user(), answer, _user()]})
    assert r.status_code == 400, r.text[:300]
    error = r.json()["error"]
    assert (error["param"], error["code"]) == ("input.3.content.0.logprobs", "request_too_large")


def test_allowed_tools_lists_no_more_than_the_tools(live: LiveServer) -> None:
    ref = {"type": "function", "name": "f"}
    choice = {"type": "allowed_tools", "mode": "auto", "tools": [ref]}
    assert post(live.url, {"input": "hi", "tools": [_tool()], "tool_choice": choice}).status_code == 200
    repeated = {**choice, "tools": [ref] * 50_000}
    r = post(live.url, {"input": "hi", "tools": [_tool()], "tool_choice": repeated})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice.tools", r.text[:300]


def test_an_overlong_metadata_key_is_not_echoed_back(live: LiveServer) -> None:
    r = post(live.url, {"input": "hi", "metadata": {"k" * 1_000_000: "v"}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "metadata"
    assert len(r.content) < 1000
    r = post(live.url, {"input": "hi", "metadata": {"k": "v" * 513}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "metadata.k"
