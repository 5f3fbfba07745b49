"""Grammar work per token and compile memory are bounded (issue 46, findings 2 and 3), over HTTP.

Finding 2: ``start: e\\ne: e e e | e e | /[a-z0-9 ]/`` (45 bytes, ambiguous) was refused with
``grammar_too_complex`` only after ~30 tokens and 108 s, each step dearer than the last, while
the streams beside it crawled.  Now the parser's item limit stops it at its first mask, and a
per-request budget of grammar time ends any request whose steps stay under the limits but add
up (mid-stream: an error chunk).  Finding 3: wide strict schemas (hundreds of KB) each spent
hundreds of MB compiling, all at once, to end at generic JSON anyway.  Now a compile is
estimated first: over the per-compile bound it is not run, and compiles running together are
admitted against a total (503 + Retry-After beyond it).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import httpx

from afm_struct.grammar.compiler import ConstraintCompiler
from afm_struct.grammar.spec import CompileOptions, Rung
from afm_struct.testing import Script

from .conftest import decode, stream_raw

AMBIGUOUS = "start: e\ne: e e e | e e | /[a-z0-9 ]/"
LETTERS = " ".join("abcdefghijklmnopqrstuvwxyz" * 8)  # in the ambiguous grammar's language
STORY = " ".join(f"w{i}" for i in range(120))


def _story_stream(url: str, out: dict[str, Any]) -> threading.Thread:
    """An ordinary stream of 120 tokens, run in a thread; its events land in ``out``."""
    def run() -> None:
        response, payloads = stream_raw(url, {"messages": [{"role": "user", "content": "story"}],
                                              "max_tokens": 120, "temperature": 0})
        out["status"] = response.status_code
        out["events"] = decode(payloads)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _story_ok(out: dict[str, Any], url: str) -> None:
    """The stream beside ended as the same request does alone: same text, same finish."""
    events = out["events"]
    assert out["status"] == 200 and [e for e in events if "error" in e] == []
    choices = [c for e in events for c in e.get("choices", [])]
    alone = httpx.post(f"{url}/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": "story"}], "max_tokens": 120, "temperature": 0}).json()
    text = "".join(c["delta"].get("content") or "" for c in choices)
    assert text == alone["choices"][0]["message"]["content"]
    assert [c["finish_reason"] for c in choices if c.get("finish_reason")] == ["length"]


def _by_prompt(tokenizer: Any) -> Any:
    """The story for the stream beside (its prompt says "story"), letters for the others."""
    story = tokenizer.encode("story")
    return lambda prompt: STORY if any(prompt[i:i + len(story)] == story for i in range(len(prompt))) \
        else LETTERS


def _content_chunks(events: list[Any]) -> list[str]:
    """The answer's content (the error chunk's own error-marked content left out)."""
    return [c["delta"]["content"] for e in events if "error" not in e for c in e.get("choices", [])
            if c.get("delta", {}).get("content")]


def test_the_ambiguous_grammar_is_refused_at_its_first_step_and_the_stream_beside_it_runs_on(
        serve, tokenizer) -> None:
    live = serve(Script(_by_prompt(tokenizer), delay_s=0.005))
    beside: dict[str, Any] = {}
    thread = _story_stream(live.url, beside)
    body = {"messages": [{"role": "user", "content": "letters"}], "max_tokens": 200,
            "guided_grammar": AMBIGUOUS}
    r = httpx.post(f"{live.url}/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "grammar_too_complex"
    # Streamed: refused within its first tokens (before: not refused after 59 tokens, each step
    # dearer than the last, up to a second).
    response, payloads = stream_raw(live.url, body)
    assert response.status_code == 200
    events = decode(payloads)
    assert events[-1]["error"]["code"] == "grammar_too_complex"
    assert len(_content_chunks(events)) < 30
    thread.join(60)
    _story_ok(beside, live.url)


class _SlowMatcher:
    """A real matcher whose every advance costs at least ``cost_s`` (a grammar that is dear at
    every step yet under the parser's limits): the budget must add these up."""

    def __init__(self, inner: Any, cost_s: float) -> None:
        self._inner = inner
        self._cost_s = cost_s

    def advance(self, token: int) -> bool:
        time.sleep(self._cost_s)
        return bool(self._inner.advance(token))

    def __getattr__(self, name: str) -> Any:
        if name == "batch_fill":  # filled on its own, as any other engine's row
            raise AttributeError(name)
        return getattr(self._inner, name)


class _SlowGrammar:
    def __init__(self, inner: Any, cost_s: float) -> None:
        self._inner = inner
        self._cost_s = cost_s

    def new_matcher(self) -> _SlowMatcher:
        return _SlowMatcher(self._inner.new_matcher(), self._cost_s)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _slow_compile(cost_s: float) -> Any:
    compilers: dict[int, ConstraintCompiler] = {}

    def compile_fn(tokenizer: Any, request: Any) -> Any:
        compiler = compilers.setdefault(id(tokenizer), ConstraintCompiler(tokenizer))
        constraint = compiler.compile(request)
        if constraint.grammar is None:
            return constraint
        return dataclasses.replace(constraint, grammar=_SlowGrammar(constraint.grammar, cost_s))

    return compile_fn


def test_a_request_over_its_grammar_budget_ends_mid_stream_and_the_others_go_on(serve) -> None:
    # Each constrained token costs >= 20 ms of grammar work; the budget is 0.1 s: the request
    # ends after a few tokens of its 100, with an error chunk naming the budget.
    live = serve(Script(STORY, delay_s=0.005), compile_fn=_slow_compile(0.02), grammar_budget_s=0.1)
    beside: dict[str, Any] = {}
    thread = _story_stream(live.url, beside)
    body = {"messages": [{"role": "user", "content": "words"}], "max_tokens": 100,
            "guided_regex": "[a-z0-9 ]+"}
    response, payloads = stream_raw(live.url, body)
    assert response.status_code == 200
    events = decode(payloads)
    error = events[-1]["error"]
    assert error["code"] == "grammar_too_complex"
    assert "grammar budget of 0.1 s" in error["message"]
    text = "".join(_content_chunks(events))
    assert 0 < len(text) and STORY.startswith(text) and len(text.split()) < 10
    assert not any(c.get("finish_reason") in ("stop", "length") for e in events for c in e.get("choices", []))
    # Not streamed, the same end is a 400 (nothing was sent yet).
    r = httpx.post(f"{live.url}/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "grammar_too_complex"
    thread.join(60)
    _story_ok(beside, live.url)


def test_the_budget_leaves_a_request_within_it_alone(serve) -> None:
    live = serve(STORY, compile_fn=_slow_compile(0.001), grammar_budget_s=30)
    r = httpx.post(f"{live.url}/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": "words"}], "max_tokens": 20, "guided_regex": "[a-z0-9 ]+"})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["finish_reason"] == "length"


def _wide_schema(n: int) -> dict[str, Any]:
    """``n`` string properties (~31 bytes each); none required, so that "{}" is an answer."""
    props = {f"k{i}": {"type": "string"} for i in range(n)}
    return {"type": "object", "properties": props, "additionalProperties": False}


def _schema_body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "fill it"}], "max_tokens": 5,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "wide", "strict": True, "schema": schema}}}


def _own_compiler(options: CompileOptions) -> tuple[Any, dict[str, ConstraintCompiler]]:
    compilers: dict[str, ConstraintCompiler] = {}

    def compile_fn(tokenizer: Any, request: Any) -> Any:
        if "c" not in compilers:
            compilers["c"] = ConstraintCompiler(tokenizer, options)
        return compilers["c"].compile(request)

    return compile_fn, compilers


def test_a_compile_over_the_per_compile_bound_is_not_run_and_serves_generic_json(serve) -> None:
    # 300 properties (~9 KB): estimated ~3.3 MB, over a bound of 2 MB.
    compile_fn, compilers = _own_compiler(CompileOptions(max_compile_mb=2))
    live = serve('{"k0": "a"}', compile_fn=compile_fn)
    r = httpx.post(f"{live.url}/v1/chat/completions", json=_schema_body(_wide_schema(300)), timeout=60)
    assert r.status_code == 200, r.text
    assert r.headers["x-grammar-constraints"] == "downgraded"
    compiler = compilers["c"]
    [(_, entry)] = list(compiler.cache._data.items())
    assert (entry.rung, entry.reason) == (Rung.GENERIC_JSON, "compile_memory")
    assert compiler.memory.used_mb == 0 and compiler.cache.weight == 0  # nothing held
    # A Lark grammar over the bound has no lower rung: a 400 naming it.
    big = "start: " + " | ".join(f'"w{i}"' for i in range(3000))
    r = httpx.post(f"{live.url}/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": "w"}], "max_tokens": 5, "guided_grammar": big})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["code"], error["param"]) == ("grammar_too_complex", "guided_grammar")
    # Under the bound, the same kind of schema compiles exact.
    r = httpx.post(f"{live.url}/v1/chat/completions", json=_schema_body(_wide_schema(50)), timeout=60)
    assert r.status_code == 200 and "x-grammar-constraints" not in r.headers


def test_compiles_over_the_total_compile_memory_get_503_with_retry_after(serve) -> None:
    # A total of 4 MB; another compile holds 2 MB (held here as a running compile holds it),
    # so a 300-property schema (~3.3 MB) does not fit beside it: 503 + Retry-After, and once
    # that compile is done, the same request compiles.
    compile_fn, compilers = _own_compiler(CompileOptions(compile_memory_mb=4))
    live = serve('{"k0": "a"}', compile_fn=compile_fn)
    httpx.post(f"{live.url}/v1/chat/completions", json=_schema_body(_wide_schema(2)), timeout=60)
    compiler = compilers["c"]
    with compiler.memory.admit(2):
        r = httpx.post(f"{live.url}/v1/chat/completions", json=_schema_body(_wide_schema(300)), timeout=60)
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "compile_memory_busy"
        assert int(r.headers["retry-after"]) >= 1
        # A small schema still fits beside it.
        small = httpx.post(f"{live.url}/v1/chat/completions", json=_schema_body(_wide_schema(3)), timeout=60)
        assert small.status_code == 200, small.text
    r = httpx.post(f"{live.url}/v1/chat/completions", json=_schema_body(_wide_schema(300)), timeout=60)
    assert r.status_code == 200, r.text
    assert "x-grammar-constraints" not in r.headers  # compiled exact
    assert compiler.memory.used_mb == 0 and compiler.memory.refused == 1
