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

from afm_struct.decoding import length_close as closing_module
from afm_struct.grammar import compiler as compiler_module
from afm_struct.grammar.compiler import ConstraintCompiler
from afm_struct.grammar.engines import llguidance_engine
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
    monkeypatch.setattr(compiler_module, "longest_forced_run", lambda *_args: None)
    # ... and so is the admission's length floor, which refuses this budget before any run.
    monkeypatch.setattr(closing_module, "length_floor", lambda *_args: 0)
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


# Grammar texts that force a run over the budget, by field (issue 28's dialect fields): each
# compiled in milliseconds and then failed at the first token (llguidance's parser: "Too many
# items (limit 50000; ff_tokens)", reported as a 500 internal error; or its lexer: a 400
# without the field).  Now each is a 400 grammar_too_complex naming the field.
FORCED_GRAMMARS = [
    ("grammar", 'root ::= "a"{1000000}', "grammar"),  # llama.cpp GBNF: the parser's budget
    ("ebnf", 'root ::= ("a" "b"){300000}', "ebnf"),  # SGLang EBNF: a repeated group
    ("guided_grammar", 'start: "x"? "a"{1000000}', "guided_grammar"),  # after a first token
    ("structured_outputs", {"grammar": 'start: A\nA: "a"{1000000}'}, "structured_outputs.grammar"),
    ("guided_grammar", "start: /a{1000000}/", "guided_grammar"),  # a regex terminal: the lexer's
    ("guided_grammar", 'start: %json{"type": "string", "pattern": "^a{1000000}$"}', "guided_grammar"),
    ("guided_choice", ["a" * 20_000, "b"], "guided_choice"),  # a long literal (a short grammar text)
    ("grammar", {"type": "regex", "value": "a{1000000}"}, "grammar.value"),  # TGI (refused before too)
]


@pytest.mark.parametrize(("field", "value", "param"), FORCED_GRAMMARS,
                         ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(FORCED_GRAMMARS)])
def test_a_grammar_forcing_a_long_run_is_a_400_naming_its_field(serve, field: str, value: Any,
                                                                param: str) -> None:
    live = serve("aaaa")
    r = httpx.post(f"{live.url}/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10, field: value})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["code"], error["param"]) == ("grammar_too_complex", param)
    assert f"$.{param}" in error["message"] and "10,000" in error["message"]
    assert "Too many items" not in error["message"] and "internal" not in error["message"]


def test_a_long_repeat_of_a_choice_is_served(serve) -> None:
    """Runs that leave a choice at each step cost microseconds, whatever their bound: not refused."""
    live = serve("abba")
    for grammar in ('start: x{1,1000000}\nx: "a" | "b"', 'root ::= [ab]{1,1000000}', 'start: "a"{0,1000000}'):
        r = httpx.post(f"{live.url}/v1/chat/completions", timeout=60, json={
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "guided_grammar": grammar})
        assert r.status_code == 200, (grammar, r.text)
        assert set(r.json()["choices"][0]["message"]["content"]) <= {"a", "b"}


@pytest.mark.parametrize(("syntax", "definition"), [("lark", "start: /a{1000000}/"), ("regex", "a{1000000}")])
def test_a_custom_tool_whose_grammar_forces_a_long_run_is_a_400(serve, syntax: str, definition: str) -> None:
    live = serve("aaaa")
    r = httpx.post(f"{live.url}/v1/responses", timeout=60, json={
        "input": "hi", "max_output_tokens": 16, "tools": [{"type": "custom", "name": "f", "format": {
            "type": "grammar", "syntax": syntax, "definition": definition}}]})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["code"], error["param"]) == ("grammar_too_complex", "tools.0.format.definition")
    assert "$.tools.0.format.definition" in error["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_parser_budget_hit_while_decoding_is_grammar_too_complex(serve, monkeypatch, stream: bool) -> None:
    """The backstop for grammars: with the compile-time check bypassed, the parser's item budget
    ("Too many items") hit at the first token is a grammar_too_complex error, not a 500."""
    monkeypatch.setattr(compiler_module, "check_grammar_budgets", lambda grammar: None)
    live = serve("aaaa", compile_fn=lambda tokenizer, request: ConstraintCompiler(tokenizer).compile(request))
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10,
            "grammar": 'root ::= "a"{1000000}'}
    if stream:
        response, payloads = stream_raw(live.url, body)
        assert response.status_code == 200
        error = decode(payloads)[-1]["error"]
    else:
        r = httpx.post(f"{live.url}/v1/chat/completions", timeout=60, json=body)
        assert r.status_code == 400, r.text
        error = r.json()["error"]
    assert error["code"] == "grammar_too_complex"
    assert "Too many items" not in error["message"] and "internal" not in error["message"]


def _chain(rules: int) -> str:
    return "\n".join(["start: r0", *(f'r{i}: ("a" r{i + 1})?' for i in range(rules)), f'r{rules}: "b"'])


def test_a_grammar_chaining_rules_too_deep_is_a_400(serve) -> None:
    """llguidance builds a grammar recursively on the compiling thread's stack: a chain of
    2,000 such rules kills the server process (SIGSEGV).  Over 500 deep it is refused (600 here:
    served before, and well short of the crash)."""
    live = serve("ab")
    r = httpx.post(f"{live.url}/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "guided_grammar": _chain(600)})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["code"], error["param"]) == ("grammar_too_complex", "guided_grammar")
    assert "602 rules deep" in error["message"] and "500" in error["message"]


def test_groups_nested_too_deep_are_a_400_saying_so(serve) -> None:
    live = serve("ab")
    grammar = "start: " + '("a" ' * 40 + '"b"' + ")" * 40
    r = httpx.post(f"{live.url}/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
        "structured_outputs": {"grammar": grammar}})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_schema", "structured_outputs.grammar")
    assert "nested too deeply" in error["message"] and "named rules" in error["message"]


def test_a_grammar_over_the_engines_size_limit_is_a_400_saying_so(serve, monkeypatch) -> None:
    """llguidance refuses a grammar over max_grammar_size symbols (500,000: a 6 MB grammar, 9 s
    to build; lowered to 1,000 here to keep the test cheap) with "grammar size too big": that is
    a grammar_too_complex naming the field and the limit, not "the grammar does not compile"."""
    monkeypatch.setattr(llguidance_engine, "DEFAULT_LIMITS", {**llguidance_engine.DEFAULT_LIMITS,
                                                               "max_grammar_size": 1_000})
    live = serve("ab", compile_fn=lambda tokenizer, request: ConstraintCompiler(tokenizer).compile(request))
    grammar = "start: " + " ".join(['("a" | "b")'] * 1_000)
    r = httpx.post(f"{live.url}/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "guided_grammar": grammar})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["code"], error["param"]) == ("grammar_too_complex", "guided_grammar")
    assert "$.guided_grammar" in error["message"] and "1,000 symbols" in error["message"]
