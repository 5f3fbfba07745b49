"""Huge inputs cost bounded memory and time (scripted model, context 8192, real HTTP).

Prompts far over the context are refused by length before they are tokenized and before any
grammar is compiled, and leave no memory behind; stop sequences are capped.

RSS is the process's resident size (the server runs in this process): after 20 refused 5 MB
prompts it must be back within 5 % of its value before them.  It used to grow by hundreds of MB
a request (tokenizing 5 MB took ~700 MB, left free in glibc arenas).
"""

from __future__ import annotations

import json
import random
import string
from typing import Any

import httpx
import pytest

import server.app
import server.live
from afm_struct.decoding.sampling import MAX_STOPS
from afm_struct.grammar.compiler import compile_constraint
from afm_struct.models.prompt_encoder import PromptEncoder
from server.limits import MAX_CONVERSATION_ITEMS, MAX_MESSAGES, MAX_PARTS, MAX_TOOLS

from .conftest import USER, wait_until

CONTEXT = 8192
TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}
SCHEMA = {"type": "json_schema", "json_schema": {"name": "answer", "strict": True, "schema": {
    "type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"],
    "additionalProperties": False}}}


def words(n_chars: int, seed: int = 0) -> str:
    """Random lowercase words (~1.8 characters a token for the embedded tokenizer)."""
    rng = random.Random(seed)
    vocab = ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 9)))
             for _ in range(5000)]
    return " ".join(rng.choice(vocab) for _ in range(n_chars // 5))[:n_chars]


@pytest.fixture
def unrecorded(monkeypatch) -> None:
    """Servers started in this test keep no copy of the requests they refuse (the suite's
    4xx recorder, tests/error_params.py, holds every refused body until the session ends, which
    is the memory these tests measure); the tests check the errors' params themselves."""
    monkeypatch.setattr(server.live, "create_app", server.app.create_app)


def rss(url: str) -> int:
    return int(httpx.get(f"{url}/health").json()["rss_bytes"])


def post(url: str, body: bytes) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", content=body, timeout=120,
                      headers={"Content-Type": "application/json"})


@pytest.fixture
def encoded(monkeypatch) -> list[int]:
    """The length of every prompt text encoded from now on."""
    lengths: list[int] = []
    encode = PromptEncoder.encode

    def spy(self: PromptEncoder, text: str, *args: Any, **kwargs: Any) -> list[int]:
        lengths.append(len(text))
        return encode(self, text, *args, **kwargs)

    monkeypatch.setattr(PromptEncoder, "encode", spy)
    return lengths


def _assert_refused_by_length(response: httpx.Response, param: str = "messages") -> dict[str, Any]:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert error["param"] == param
    assert "characters long, so at least" in error["message"]
    assert f"maximum context length is {CONTEXT} tokens" in error["message"]
    return error  # type: ignore[no-any-return]


def test_twenty_huge_prompts_are_refused_untokenized_and_leave_rss_flat(unrecorded, serve, encoded,
                                                                          ) -> None:
    live = serve(context_length=CONTEXT)
    body = json.dumps({"messages": [{"role": "user", "content": words(5_000_000)}],
                       "max_tokens": 5}).encode()
    assert httpx.post(f"{live.url}/v1/chat/completions", timeout=30,
                      json={"messages": USER, "max_tokens": 5}).status_code == 200
    baseline = rss(live.url)
    for _ in range(20):
        error = _assert_refused_by_length(post(live.url, body))
        assert "messages are 5000" in error["message"]
    assert max(encoded, default=0) < 10_000  # the 5 MB prompt was never tokenized
    assert wait_until(lambda: rss(live.url) <= baseline * 1.05, timeout=10), (baseline, rss(live.url))


def test_prompts_under_the_length_bound_but_over_the_context_leave_rss_flat(unrecorded, serve, tokenizer,
                                                                             encoded) -> None:
    context = 2048  # a smaller model, so that the test tokenizes less
    live = serve(context_length=context)
    longest_piece = max(map(len, tokenizer.hf.get_vocab()))
    text = words(longest_piece * context - 2000)  # tokenized (~90k tokens), then refused
    body = json.dumps({"messages": [{"role": "user", "content": text}], "max_tokens": 5}).encode()
    assert httpx.post(f"{live.url}/v1/chat/completions", timeout=30,
                      json={"messages": USER, "max_tokens": 5}).status_code == 200
    baseline = rss(live.url)
    for _ in range(20):
        response = post(live.url, body)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert (error["code"], error["param"]) == ("context_length_exceeded", "messages")
        assert f"maximum context length is {context} tokens" in error["message"]
    assert max(encoded) > len(text)  # these were tokenized
    assert wait_until(lambda: rss(live.url) <= baseline * 1.05, timeout=10), (baseline, rss(live.url))


@pytest.mark.parametrize("where", ["tool_description", "tool_call_arguments", "many_messages",
                                   "system_message"])
def test_every_huge_field_in_the_prompt_is_refused_before_tokenizing_or_compiling(
        serve, encoded, where) -> None:
    compiled: list[Any] = []

    def compile_fn(tok: Any, request: Any) -> Any:
        compiled.append(request)
        return compile_constraint(tok, request)

    live = serve(context_length=CONTEXT, compile_fn=compile_fn)
    big = words(1_000_000)
    tool = json.loads(json.dumps(TOOL))
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    if where == "tool_description":
        tool["function"]["description"] = big
    elif where == "tool_call_arguments":
        messages += [{"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
                         "name": "lookup", "arguments": json.dumps({"q": big})}}]},
                     {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    elif where == "many_messages":
        # As many messages as allowed, the million characters spread over them.
        share = len(big) // MAX_MESSAGES
        messages = [{"role": "user", "content": big[i * share:(i + 1) * share]} for i in range(MAX_MESSAGES)]
    else:
        messages.insert(0, {"role": "system", "content": big})
    response = httpx.post(f"{live.url}/v1/chat/completions", timeout=120, json={
        "messages": messages, "tools": [tool], "tool_choice": "required", "response_format": SCHEMA})
    _assert_refused_by_length(response)
    assert max(encoded, default=0) < 10_000
    assert compiled == []  # neither the tool grammar nor the response format was compiled


def test_more_stop_sequences_than_the_cap_are_refused(serve) -> None:
    """Every token is scanned for every stop on the thread all requests share."""
    live = serve(context_length=CONTEXT)
    ok = httpx.post(f"{live.url}/v1/chat/completions", timeout=30,
                    json={"messages": USER, "stop": [f"s{i}" for i in range(MAX_STOPS)]})
    assert ok.status_code == 200, ok.text
    response = httpx.post(f"{live.url}/v1/chat/completions", timeout=30,
                          json={"messages": USER, "stop": [f"s{i}" for i in range(100_000)]})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_value", "stop")
    assert f"at most {MAX_STOPS}" in error["message"]


def _many(n: int, item: Any) -> list[Any]:
    return [item] * n


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/v1/chat/completions", {"messages": _many(MAX_MESSAGES + 1, USER[0])}, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": _many(
        MAX_PARTS + 1, {"type": "text", "text": "a"})}]}, "messages.0.content"),
    ("/v1/chat/completions", {"messages": [*USER, {"role": "assistant", "tool_calls": _many(
        MAX_PARTS + 1, {"id": "c", "type": "function", "function": {"name": "lookup", "arguments": "{}"}})}]},
     "messages.1.tool_calls"),
    ("/v1/chat/completions", {"messages": USER, "tools": _many(MAX_TOOLS + 1, TOOL)}, "tools"),
    ("/v1/responses", {"input": _many(MAX_PARTS + 1, {"role": "user", "content": "a"})}, "input"),
    ("/v1/responses", {"input": "hi", "tools": _many(MAX_TOOLS + 1, {"type": "function", "name": "f",
                                                                      "parameters": {"type": "object"}})},
     "tools"),
    ("/api/chat", {"model": "scripted", "messages": _many(MAX_MESSAGES + 1, USER[0])}, None),
], ids=["messages", "content_parts", "tool_calls", "tools", "responses_input", "responses_tools",
        "ollama_messages"])
def test_lists_over_their_bound_are_refused_before_their_items_are_read(serve, path, body, param) -> None:
    """200,000 one-word messages (5.8 MB) cost ~6 s of validation and value checks holding the
    GIL every stream needs; each list has a bound (OpenAI's where it has one), refused by count
    with ``param`` at the list.  At the bound the same lists are read (another 400 or a 200)."""
    live = serve(context_length=CONTEXT)
    r = httpx.post(f"{live.url}{path}", json=body, timeout=60)
    assert r.status_code == 400, r.text[:300]
    if param is None:  # Ollama's error shape: {"error": "..."}
        assert "at most 2048" in r.json()["error"], r.text[:300]
        return
    error = r.json()["error"]
    assert error["param"] == param and "at most" in error["message"], error


@pytest.mark.parametrize(("path", "key"), [("/v1/chat/completions", "messages"), ("/v1/responses", "input")])
def test_many_lists_each_under_its_bound_are_refused_by_their_total(serve, path, key) -> None:
    """2,048 messages of 8 parts each pass every per-list bound; the conversation's total is
    bounded too, before any message is validated."""
    live = serve(context_length=CONTEXT)
    message = {"role": "user", "content": _many(8, {"type": "text" if key == "messages" else "input_text",
                                                   "text": "a"})}
    r = httpx.post(f"{live.url}{path}", json={key: _many(MAX_MESSAGES, message)}, timeout=60)
    assert r.status_code == 400, r.text[:300]
    error = r.json()["error"]
    assert error["param"] == key and f"at most {MAX_CONVERSATION_ITEMS:,}" in error["message"], error
