"""Concurrent streams never mix; /health answers during generation; structured-output delivery."""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass

import httpx

from afm_struct.testing import Script

from .conftest import USER, decode, stream_raw


def test_concurrent_streams_never_mix(serve) -> None:
    def script(ids: list[int]) -> str:
        n = re.findall(r"say (\d+)", live.loaded.tokenizer.decode(ids))[-1]
        return " ".join(f"s{n}x{i}" for i in range(12))

    live = serve(Script(script, delay_s=0.005))
    results: dict[int, list] = {}

    def run(n: int) -> None:
        _, payloads = stream_raw(live.url, {"messages": [{"role": "user", "content": f"say {n}"}],
                                            "stream_options": {"include_usage": True}},
                                 {"X-Request-ID": f"conc-{n}"})
        results[n] = decode(payloads)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(results) == list(range(6))
    ids = set()
    for n, events in results.items():
        text = "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"])
        assert text == " ".join(f"s{n}x{i}" for i in range(12)), (n, text)
        assert len({e["id"] for e in events}) == 1
        ids.add(events[0]["id"])
        assert events[-1]["usage"]["completion_tokens"] > 0
    assert len(ids) == 6


def test_health_answers_during_generation(serve) -> None:
    live = serve(Script(" ".join(f"w{i}" for i in range(200)), delay_s=0.02))
    with httpx.stream("POST", f"{live.url}/v1/chat/completions", timeout=30,
                      json={"messages": USER, "stream": True}, headers={"X-Request-ID": "busy"}) as response:
        lines = response.iter_lines()
        next(lines)
        t0 = time.perf_counter()
        health = httpx.get(f"{live.url}/health", timeout=2).json()
        latency = time.perf_counter() - t0
        assert health["requests_in_flight"] == 1 and latency < 0.5
        httpx.post(f"{live.url}/v1/chat/completions/busy/cancel")
        list(lines)


@dataclass
class FakeCompiled:
    """Stands in for the grammar compiler's CompiledConstraint (mode, reason, matcher, sanitize)."""

    mode: str
    reason: str | None = None

    def new_matcher(self) -> None:
        return None  # no mask: the scripted model's text is delivered as the "grammar" allowed

    def sanitize(self, text: str) -> str:
        from server.structured import sanitize_json_text

        return sanitize_json_text(text)


FENCED = 'Here you go:\n```json\n{"name": "Ada", "age": 36}\n```'
SCHEMA = {"type": "json_schema", "json_schema": {"name": "person", "strict": True, "schema": {
    "type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"], "additionalProperties": False}}}


def _content(events: list) -> tuple[str, int]:
    pieces = [e["choices"][0]["delta"]["content"] for e in events
              if e["choices"] and e["choices"][0]["delta"].get("content")]
    return "".join(pieces), len(pieces)


def test_best_effort_strict_schema_is_downgraded_and_unfenced(serve) -> None:
    live = serve(FENCED, compile_fn=lambda tok, req: FakeCompiled("downgraded", "unsupported keyword"))
    response, payloads = stream_raw(live.url, {"messages": USER, "response_format": SCHEMA})
    assert response.headers["x-grammar-constraints"] == "downgraded"
    content, _ = _content(decode(payloads))
    assert "```" not in content and json.loads(content) == {"name": "Ada", "age": 36}
    r = httpx.post(f"{live.url}/v1/chat/completions", json={"messages": USER, "response_format": SCHEMA})
    assert r.headers["x-grammar-constraints"] == "downgraded"
    assert json.loads(r.json()["choices"][0]["message"]["content"]) == {"name": "Ada", "age": 36}


def test_json_object_is_unfenced_without_the_downgrade_header(serve) -> None:
    live = serve(FENCED, compile_fn=lambda tok, req: FakeCompiled("downgraded"))
    response, payloads = stream_raw(live.url, {"messages": USER, "response_format": {"type": "json_object"}})
    assert "x-grammar-constraints" not in response.headers  # json_object is not a strict request
    content, _ = _content(decode(payloads))
    assert json.loads(content) == {"name": "Ada", "age": 36}


def test_enforced_constraint_streams_as_generated(serve) -> None:
    doc = '{"name": "Ada", "age": 36}'
    seen = []

    def compile_fn(tok, req):
        seen.append(req)
        return FakeCompiled("enforced")

    live = serve(doc, compile_fn=compile_fn)
    response, payloads = stream_raw(live.url, {"messages": USER, "response_format": SCHEMA})
    assert "x-grammar-constraints" not in response.headers
    content, n = _content(decode(payloads))
    assert content == doc and n > 3  # token by token, not deferred
    assert seen[0].kind == "json_schema" and seen[0].strict is True
    assert seen[0].schema == SCHEMA["json_schema"]["schema"]


def test_text_response_format_is_not_compiled(serve) -> None:
    calls = []
    live = serve("plain", compile_fn=lambda tok, req: calls.append(req))
    r = httpx.post(f"{live.url}/v1/chat/completions",
                   json={"messages": USER, "response_format": {"type": "text"}})
    assert r.json()["choices"][0]["message"]["content"] == "plain" and calls == []
