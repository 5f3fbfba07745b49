"""What agent clients send, replayed: Claude Code's and Codex CLI's captured request bodies
(tests/fixtures/agent_clients/, recorded from the unmodified clients) against a live server on a
scripted model that calls the client's shell tool, then answers once the tool's output is back;
and the accept-and-state rules on both doors (hosted tools left out and named, a budget beyond
the context clamped and said, fields that cannot change the output accepted, thinking mapped
onto the reasoning channel)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from afm_struct.testing import Script
from server.model_alias import parse_aliases

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "agent_clients"
OUTPUT = "hello-from-afm-42"
WEATHER = {"name": "get_weather", "description": "Current weather of a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"], "additionalProperties": False}}
USER = [{"role": "user", "content": "hi"}]
# The headers a client sent that matter here (the key, Anthropic's version and beta list).
KEPT_HEADERS = ("x-api-key", "anthropic-version", "anthropic-beta", "authorization")
# The clients' hard-coded model names reach the scripted model.
ALIASES = parse_aliases(["claude-*=scripted", "gpt-*=scripted"])


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def shell_agent(tokenizer: Any, tool: str, key: str) -> Script:
    """Calls ``tool`` to run ``echo OUTPUT`` until the prompt holds the command's output (the
    tool result), then answers in words."""
    call = json.dumps({"name": tool, "arguments": {key: f"echo {OUTPUT}"}})

    def answer(prompt_ids: list[int]) -> str:
        prompt = tokenizer.decode(prompt_ids)
        if prompt.count(OUTPUT) > prompt.count(f"echo {OUTPUT}"):
            return f"The command printed {OUTPUT}."
        return f"<tool_call>\n{call}\n</tool_call>"

    return Script(answer)


def replay(url: str, record: dict[str, Any]) -> tuple[httpx.Response, list[tuple[str, dict[str, Any]]]]:
    """POST a recorded request; the response and its SSE events as (event name, data)."""
    headers = {k: v for k, v in record["headers"].items() if k.lower() in KEPT_HEADERS}
    with httpx.stream("POST", url + record["path"], json=record["body"], headers=headers, timeout=300) as r:
        if r.status_code != 200:
            r.read()
            return r, []
        lines = [line for line in r.iter_lines() if line]
    names = [line[7:] for line in lines if line.startswith("event: ")]
    data = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
    assert len(names) == len(data) and [d["type"] for d in data] == names
    return r, list(zip(names, data, strict=True))


def check_messages_stream(events: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Anthropic's event grammar; returns the message the events build."""
    names = [name for name, _ in events]
    assert names[:2] == ["message_start", "ping"] and names[-2:] == ["message_delta", "message_stop"]
    message = events[0][1]["message"]
    blocks: dict[int, dict[str, Any]] = {}
    open_index = None
    for name, data in events[2:-2]:
        if name == "content_block_start":
            assert open_index is None and data["index"] == len(blocks)
            open_index = data["index"]
            blocks[open_index] = {**data["content_block"], "_json": ""}
        elif name == "content_block_delta":
            assert data["index"] == open_index
            block, delta = blocks[open_index], data["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "input_json_delta":
                block["_json"] += delta["partial_json"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            else:
                assert delta["type"] == "signature_delta" and block["type"] == "thinking"
        else:
            assert name == "content_block_stop" and data["index"] == open_index
            open_index = None
    assert open_index is None
    for block in blocks.values():
        text = block.pop("_json")
        if block["type"] == "tool_use":
            block["input"] = json.loads(text)
    message.update(content=[blocks[i] for i in sorted(blocks)], **events[-2][1]["delta"])
    return message


def test_claude_code_turns_replayed(serve, tokenizer) -> None:
    live = serve(shell_agent(tokenizer, "Bash", "command"), context_length=65536, model_aliases=ALIASES)
    first = fixture("claude_code_2.1.197_turn1.json")
    assert first["body"]["max_tokens"] == 64000 and first["body"]["thinking"] == {"type": "adaptive"}
    r, events = replay(live.url, first)
    assert r.status_code == 200, r.text
    # 64,000 tokens do not fit beside Claude Code's ~20,000-token prompt: a ceiling, said so.
    assert r.headers["x-afm-max-tokens-clamped"] == "64000"
    message = check_messages_stream(events)
    assert message["stop_reason"] == "tool_use"
    (call,) = message["content"]
    assert call["type"] == "tool_use" and call["name"] == "Bash"
    assert call["input"] == {"command": f"echo {OUTPUT}"}
    second = fixture("claude_code_2.1.197_turn2.json")
    r, events = replay(live.url, second)
    assert r.status_code == 200, r.text
    answer = check_messages_stream(events)
    assert answer["stop_reason"] == "end_turn"
    assert answer["content"][-1]["text"] == f"The command printed {OUTPUT}."
    # count_tokens on the same body counts what the message used.
    body = {k: v for k, v in second["body"].items() if k not in ("max_tokens", "stream", "metadata")}
    counted = httpx.post(f"{live.url}/v1/messages/count_tokens", json=body, timeout=120)
    assert counted.status_code == 200 and counted.json()["input_tokens"] == answer["usage"]["input_tokens"]


def test_claude_code_turn_over_the_context_is_refused_in_anthropics_shape(serve) -> None:
    live = serve("Hello", context_length=8192, model_aliases=ALIASES)
    r, _ = replay(live.url, fixture("claude_code_2.1.197_turn1.json"))
    assert r.status_code == 400
    error = r.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert "maximum context length is 8192 tokens" in error["error"]["message"]


def test_codex_cli_turns_replayed(serve, tokenizer) -> None:
    from .test_responses_spec import events_conform

    live = serve(shell_agent(tokenizer, "exec_command", "cmd"), context_length=65536, model_aliases=ALIASES)
    first = fixture("codex_0.171.0_turn1.json")
    kinds = [t["type"] for t in first["body"]["tools"]]
    assert "namespace" in kinds and "web_search" in kinds
    r, events = replay(live.url, first)
    assert r.status_code == 200, r.text
    assert r.headers["x-afm-ignored-tools"] == "multi_agent_v1, web_search"
    events_conform([data for _, data in events])
    final = events[-1][1]["response"]
    assert final["status"] == "completed"
    (call,) = final["output"]
    assert call["type"] == "function_call" and call["name"] == "exec_command"
    assert json.loads(call["arguments"]) == {"cmd": f"echo {OUTPUT}"}
    assert {t["name"] for t in final["tools"]} == {"exec_command", "write_stdin", "request_user_input",
                                                    "view_image", "get_goal", "create_goal", "update_goal"}
    r, events = replay(live.url, fixture("codex_0.171.0_turn2.json"))
    assert r.status_code == 200, r.text
    final = events[-1][1]["response"]
    assert final["status"] == "completed"
    assert final["output"][-1]["content"][0]["text"] == f"The command printed {OUTPUT}."


def test_responses_hosted_tools_left_out_and_named(serve) -> None:
    live = serve("Hello")
    weather = {"type": "function", "name": "get_weather", "parameters": WEATHER["input_schema"]}
    hosted = [{"type": "web_search"}, {"type": "code_interpreter", "container": {}},
              {"type": "computer_use_preview", "display_width": 10}]
    body = {"input": "hi", "tools": [weather, *hosted]}
    r = httpx.post(f"{live.url}/v1/responses", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert r.headers["x-afm-ignored-tools"] == "web_search, code_interpreter, computer_use_preview"
    assert [t["name"] for t in r.json()["tools"]] == ["get_weather"]
    plain = httpx.post(f"{live.url}/v1/responses", json={"input": "hi"}, timeout=60)
    assert "x-afm-ignored-tools" not in plain.headers
    # Naming a tool the server cannot run is still refused.
    forced = httpx.post(f"{live.url}/v1/responses", json={**body, "tool_choice": {"type": "web_search"}})
    assert forced.status_code == 400 and forced.json()["error"]["param"] == "tool_choice.type"


def test_messages_hosted_tools_left_out_and_named(serve) -> None:
    live = serve("Hello")
    body = {"model": "scripted", "max_tokens": 20, "messages": USER,
            "tools": [WEATHER, {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
                      {"type": "code_execution_20250825", "name": "code_execution"}]}
    r = httpx.post(f"{live.url}/v1/messages", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert r.headers["x-afm-ignored-tools"] == "web_search, code_execution"
    forced = httpx.post(f"{live.url}/v1/messages",
                        json={**body, "tool_choice": {"type": "tool", "name": "web_search"}})
    assert forced.status_code == 400 and "hosted tool" in forced.json()["error"]["message"]
    only_hosted = {**body, "tools": body["tools"][1:]}
    r = httpx.post(f"{live.url}/v1/messages", json=only_hosted, timeout=60)
    assert r.status_code == 200 and r.json()["content"][0]["text"] == "Hello"


def test_budget_beyond_the_context_is_clamped_and_said(serve) -> None:
    live = serve("Hello", context_length=2048)
    r = httpx.post(f"{live.url}/v1/responses", json={"input": "hi", "max_output_tokens": 100_000}, timeout=60)
    assert r.status_code == 200 and r.headers["x-afm-max-tokens-clamped"] == "100000"
    assert r.json()["max_output_tokens"] == 100_000
    # A budget that the context could hold stays explicit: 400 when the prompt leaves less.
    r = httpx.post(f"{live.url}/v1/responses", json={"input": "w " * 1500, "max_output_tokens": 1000})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    r = httpx.post(f"{live.url}/v1/messages", json={"model": "scripted", "max_tokens": 64000,
                                                    "messages": USER})
    assert r.status_code == 200 and r.headers["x-afm-max-tokens-clamped"] == "64000"
    r = httpx.post(f"{live.url}/v1/messages", json={"model": "scripted", "max_tokens": 100, "messages": USER})
    assert r.status_code == 200 and "x-afm-max-tokens-clamped" not in r.headers


def test_fields_that_cannot_change_the_output_are_accepted(serve) -> None:
    live = serve("Hello")
    r = httpx.post(f"{live.url}/v1/responses", timeout=60, json={
        "input": "hi", "context_management": [{"type": "compaction", "compact_threshold": 1000}],
        "client_metadata": {"turn_id": "1"}, "reasoning": {"summary": "auto"},
        "include": ["reasoning.encrypted_content"]})
    assert r.status_code == 200, r.text
    r = httpx.post(f"{live.url}/v1/messages?beta=true", timeout=60,
                   headers={"anthropic-beta": "context-management-2025-06-27,effort-2025-11-24",
                            "anthropic-version": "2023-06-01"},
                   json={"model": "scripted", "max_tokens": 50, "messages": USER,
                         "metadata": {"user_id": "u"},
                         "context_management": {"edits": [{"type": "clear_thinking_20251015",
                                                           "keep": "all"}]},
                         "output_config": {"effort": "high"}, "thinking": {"type": "adaptive"},
                         "cache_control": {"type": "ephemeral"}, "service_tier": "auto"})
    assert r.status_code == 200 and r.json()["content"][0]["text"] == "Hello", r.text
    # A constraint field is never ignored: a bad one is a 400.
    bad = httpx.post(f"{live.url}/v1/messages", json={"model": "scripted", "max_tokens": 50, "messages": USER,
                                                      "output_config": {"format": {"type": "regex"}}})
    assert bad.status_code == 400 and "output_config.format.type" in bad.json()["error"]["message"]


def test_thinking_maps_onto_the_reasoning_channel(serve) -> None:
    live = serve("<think>Let me see.</think>Paris.", reasoning="think")
    body = {"model": "scripted", "max_tokens": 60, "messages": USER,
            "thinking": {"type": "enabled", "budget_tokens": 30}}
    message = httpx.post(f"{live.url}/v1/messages", json=body, timeout=60).json()
    assert [b["type"] for b in message["content"]] == ["thinking", "text"], message
    assert message["content"][0]["thinking"] == "Let me see." and message["content"][1]["text"] == "Paris."
    _, events = replay(live.url, {"path": "/v1/messages", "headers": {}, "body": {**body, "stream": True}})
    streamed = check_messages_stream(events)
    assert [b["type"] for b in streamed["content"]] == ["thinking", "text"]
    assert any(d["delta"]["type"] == "signature_delta" for n, d in events if n == "content_block_delta")
    # History: thinking and tool_use blocks passed back are read, not refused.
    history = [*USER, {"role": "assistant", "content": message["content"]}, {"role": "user", "content": "ok"}]
    assert httpx.post(f"{live.url}/v1/messages", json={**body, "messages": history}).status_code == 200
    too_big = httpx.post(f"{live.url}/v1/messages", json={**body, "thinking": {"type": "enabled",
                                                                                "budget_tokens": 60}})
    assert too_big.status_code == 400 and "thinking.budget_tokens" in too_big.json()["error"]["message"]


def test_failure_after_the_status_is_an_error_event(serve) -> None:
    live = serve(Script("word " * 50, fail_at=3))
    body = {"model": "scripted", "max_tokens": 60, "messages": USER, "stream": True}
    _, events = replay(live.url, {"path": "/v1/messages", "headers": {}, "body": body})
    names = [n for n, _ in events]
    assert names[0] == "message_start" and names[-1] == "error" and "message_stop" not in names
    assert events[-1][1]["error"]["type"] == "api_error"


@pytest.mark.parametrize("block", [
    {"type": "image", "source": {"type": "url", "url": "http://x/y.png"}},
    {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}},
])
def test_media_blocks_are_refused_clearly(serve, block) -> None:
    live = serve("Hello")
    r = httpx.post(f"{live.url}/v1/messages", json={"model": "scripted", "max_tokens": 5,
                                                    "messages": [{"role": "user", "content": [block]}]})
    assert r.status_code == 400
    message = r.json()["error"]["message"]
    assert message.startswith(f"messages.0.content.0 is a{'n' if block['type'] == 'image' else ''} ")
    assert "text models" in message


def test_an_alias_reaches_the_model_on_every_door(serve) -> None:
    # --model-alias answered on the OpenAI and Anthropic doors only; Ollama's clients (and
    # GET /v1/models/{id}) got 404 for the same name.
    live = serve("Hello", model_aliases=ALIASES)
    user = [{"role": "user", "content": "hi"}]
    doors = [("/v1/chat/completions", {"model": "gpt-4o", "messages": user}),
             ("/v1/messages", {"model": "claude-x", "max_tokens": 8, "messages": user}),
             ("/api/chat", {"model": "claude-x", "messages": user, "stream": False}),
             ("/api/chat", {"model": "claude-x:latest", "messages": user, "stream": False}),
             ("/api/generate", {"model": "gpt-4o", "prompt": "hi", "stream": False}),
             ("/api/show", {"model": "gpt-4o"})]
    for path, body in doors:
        r = httpx.post(f"{live.url}{path}", json=body, timeout=60)
        assert r.status_code == 200, (path, body["model"], r.text)
    assert httpx.get(f"{live.url}/v1/models/claude-x", timeout=10).json()["id"] == "scripted"
    # A name no alias matches is still a 404 naming what to send.
    r = httpx.post(f"{live.url}/api/chat", json={"model": "llama3", "messages": user, "stream": False})
    assert r.status_code == 404 and "scripted" in r.text
