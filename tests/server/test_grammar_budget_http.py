"""One request's expensive pattern harms no other request (issue 26, item 1), over real HTTP.

The repro: two ordinary streams run, then a request whose schema forces a million-character run
(``^a{1000000}$``, ``^(ab){500000}$``, the same as a tool parameter).  Before, that request
reached decoding, llguidance stopped with LexerTooComplex, and every stream running with it
ended with ``finish_reason: "error"``.  Now the compile refuses it (strict: 400 at the schema
path) or serves it without the pattern (non-strict), and the streams end as they would alone.
When an engine budget is hit during decoding anyway (here: the compile-time check bypassed),
only that request fails, with a typed ``grammar_too_complex`` error.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx
import pytest

from afm_struct.grammar import compiler as compiler_module
from afm_struct.grammar.compiler import ConstraintCompiler
from afm_struct.testing import Script

from .conftest import decode, sse_payloads, stream_raw

STORY = " ".join(f"w{i}" for i in range(120))
A_MILLION = "^a{1000000}$"


def _schema_format(pattern: str, strict: bool) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "x", "strict": strict,
                                                   "schema": {"type": "string", "pattern": pattern}}}


def _tool(pattern: str, strict: bool) -> dict[str, Any]:
    return {"type": "function", "function": {"name": "f", "strict": strict, "parameters": {
        "type": "object", "properties": {"v": {"type": "string", "pattern": pattern}},
        "required": ["v"], "additionalProperties": False}}}


def _story(i: int) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": f"tell a story {i}"}], "max_tokens": 120,
            "temperature": 0}


class TwoStreams:
    """Two ordinary streams (max_tokens 120) running while the test sends its bad request."""

    def __init__(self, url: str, alone_url: str) -> None:
        self.url = url
        self.alone_url = alone_url  # the same scripted model, without the delay
        self.results: dict[int, list[Any]] = {}
        self.started = threading.Barrier(3)
        self.threads = [threading.Thread(target=self._run, args=(i,)) for i in (0, 1)]
        for t in self.threads:
            t.start()
        self.started.wait(30)

    def _run(self, i: int) -> None:
        with httpx.stream("POST", f"{self.url}/v1/chat/completions", json={**_story(i), "stream": True},
                          timeout=60) as r:
            lines = r.iter_lines()
            first = [next(lines), next(lines)]  # the first event is out: the stream is running
            self.started.wait(30)
            self.results[i] = decode(sse_payloads(iter([*first, *lines])))

    @property
    def running(self) -> bool:
        """True while either stream has not ended yet."""
        return any(t.is_alive() for t in self.threads)

    def finish(self) -> None:
        """Each stream ended as the same request does alone: same text, same finish reason."""
        for t in self.threads:
            t.join(60)
        for i in (0, 1):
            events = self.results[i]
            assert [e for e in events if "error" in e] == [], events[-2:]
            choices = [c for e in events for c in e.get("choices", [])]
            reasons = [c["finish_reason"] for c in choices if c.get("finish_reason")]
            text = "".join(c["delta"].get("content") or "" for c in choices)
            alone = httpx.post(f"{self.alone_url}/v1/chat/completions", json=_story(i), timeout=60).json()
            assert reasons == [alone["choices"][0]["finish_reason"]] == ["length"]
            assert text == alone["choices"][0]["message"]["content"]


@pytest.mark.parametrize("pattern", [A_MILLION, "^(ab){500000}$"])
def test_a_strict_expensive_pattern_is_a_400_and_the_streams_run_on(serve, pattern: str) -> None:
    live = serve(Script(STORY, delay_s=0.005))
    streams = TwoStreams(live.url, serve(STORY).url)
    r = httpx.post(f"{live.url}/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": "say a"}], "max_tokens": 20,
        "response_format": _schema_format(pattern, strict=True)})
    assert streams.running
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "grammar_too_complex"
    assert error["param"] == "response_format.json_schema.schema.pattern"
    assert "LexerTooComplex" not in error["message"] and "<state>" not in error["message"]
    streams.finish()


def test_a_strict_tool_with_an_expensive_pattern_is_a_400_at_its_parameters(serve) -> None:
    live = serve(Script(STORY, delay_s=0.005))
    streams = TwoStreams(live.url, serve(STORY).url)
    r = httpx.post(f"{live.url}/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": "call f"}], "max_tokens": 30,
        "tools": [_tool(A_MILLION, strict=True)], "tool_choice": "required"})
    assert streams.running
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["code"], error["param"]) == ("grammar_too_complex",
                                               "tools.0.function.parameters.properties.v.pattern")
    assert "$.tools[0].function.parameters.properties.v.pattern" in error["message"]
    streams.finish()


def test_non_strict_expensive_patterns_are_served_without_them(serve) -> None:
    live = serve('<tool_call>\n{"name": "f", "arguments": {"v": "aaa"}}\n</tool_call>')
    streams_live = serve(Script(STORY, delay_s=0.005))
    streams = TwoStreams(streams_live.url, serve(STORY).url)
    for url, body in ((streams_live.url, {"response_format": _schema_format(A_MILLION, strict=False)}),
                      (live.url, {"tools": [_tool(A_MILLION, strict=False)], "tool_choice": "required"})):
        r = httpx.post(f"{url}/v1/chat/completions", timeout=60, json={
            "messages": [{"role": "user", "content": "go"}], "max_tokens": 30, **body})
        assert r.status_code == 200, r.text
        assert "x-grammar-constraints" not in r.headers  # the header concerns strict requests
    call = r.json()["choices"][0]["message"]["tool_calls"][0]["function"]
    assert json.loads(call["arguments"]) == {"v": "aaa"}
    streams.finish()


@pytest.mark.parametrize("stream", [False, True])
def test_a_budget_hit_while_decoding_ends_only_that_request(serve, monkeypatch, stream: bool) -> None:
    """The backstop: should an engine budget be hit in mid-output anyway (the compile-time check
    is bypassed here), only that request fails, with grammar_too_complex and no internals."""
    monkeypatch.setattr(compiler_module, "longest_forced_run", lambda schema: None)
    compilers: dict[int, ConstraintCompiler] = {}

    def compile_fn(tokenizer: Any, request: Any) -> Any:  # a compiler of its own: no shared cache
        if id(tokenizer) not in compilers:
            compilers[id(tokenizer)] = ConstraintCompiler(tokenizer)
        return compilers[id(tokenizer)].compile(request)

    # Slower streams: this compile and the first mask take about a second (a million-long run).
    live = serve(Script(STORY, delay_s=0.03), compile_fn=compile_fn)
    streams = TwoStreams(live.url, serve(STORY).url)
    body = {"messages": [{"role": "user", "content": "say a"}], "max_tokens": 20,
            "response_format": _schema_format(A_MILLION, strict=True)}
    if stream:
        response, payloads = stream_raw(live.url, body)
        assert response.status_code == 200
        error = decode(payloads)[-1]["error"]
    else:
        r = httpx.post(f"{live.url}/v1/chat/completions", timeout=60, json=body)
        assert r.status_code == 400, r.text
        error = r.json()["error"]
    assert streams.running  # it failed while they ran
    assert error["code"] == "grammar_too_complex"
    assert "too many" not in error["message"] and "<state>" not in error["message"]
    streams.finish()
