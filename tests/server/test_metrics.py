"""GET /metrics over real HTTP: the counters and histograms match the traffic sent."""

from __future__ import annotations

import json
import logging
import threading
import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from server.tenants import ApiKey

from .conftest import USER, stream_raw, wait_until

DOC = '{"name": "Ada", "age": 36}'
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
KEY = "metrics-test-key"


def samples(url: str, headers: dict[str, str] | None = None) -> dict[tuple[str, frozenset], float]:
    """Every sample of /metrics, keyed by (name, labels)."""
    r = httpx.get(f"{url}/metrics", headers=headers or {}, timeout=10)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def total(metrics: dict, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in metrics.items() if n == name and want <= ls)


def post(url: str, body: dict, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers or {}, timeout=60)


def test_counters_and_histograms_follow_the_traffic(serve) -> None:
    live = serve(DOC)
    for _ in range(3):
        assert post(live.url, {"messages": USER, "max_tokens": 40}).status_code == 200
    for _ in range(2):
        response, payloads = stream_raw(live.url, {"messages": USER, "max_tokens": 40})
        assert response.status_code == 200 and payloads[-1] == "[DONE]"
    # The compile cache is process-wide: a schema and a regex no other test compiles, so the
    # first compile of each is a miss whatever ran before.
    unique = uuid.uuid4().hex[:8]
    fmt = {"type": "json_schema", "json_schema": {"name": "p", "strict": True,
                                                  "schema": {**SCHEMA, "title": f"metrics-{unique}"}}}
    for _ in range(2):  # the second compile is a cache hit
        assert post(live.url, {"messages": USER, "response_format": fmt}).status_code == 200
    assert post(live.url, {"messages": USER, "temperature": -1}).status_code == 400
    regex = f"[0-9]{{3}}|z{unique}"
    assert post(live.url, {"messages": USER, "max_tokens": 20, "guided_regex": regex}).status_code == 200
    m = samples(live.url)
    route = "/v1/chat/completions"
    assert total(m, "afm_requests_total", endpoint=route, status="200", mode="text") == 5
    assert total(m, "afm_requests_total", endpoint=route, status="200", mode="json_schema") == 2
    assert total(m, "afm_requests_total", endpoint=route, status="200", mode="regex") == 1
    assert total(m, "afm_requests_total", endpoint=route, status="400") == 1
    assert total(m, "afm_errors_total", type="invalid_request_error") == 1
    assert total(m, "afm_time_to_first_token_seconds_count") == 8
    assert total(m, "afm_time_to_first_token_seconds_count", mode="json_schema") == 2
    assert total(m, "afm_request_duration_seconds_count", endpoint=route) == 9
    assert total(m, "afm_finish_reasons_total") == 8
    assert total(m, "afm_grammar_compile_cache_total", result="hit") == 1
    assert total(m, "afm_grammar_compile_cache_total", result="miss") == 2
    assert total(m, "afm_grammar_compile_seconds_count", kind="regex") == 1
    assert total(m, "afm_grammar_compile_seconds_count") == 2
    # Every completion token is counted; the scripted document's forced keys among them.
    completion = total(m, "afm_completion_tokens_total")
    assert completion > 0 and 0 < total(m, "afm_forced_tokens_total") <= completion
    assert total(m, "afm_prompt_tokens_total", tenant="anonymous") > 0
    assert m[("afm_capacity", frozenset())] == live.state.scheduler.load[1]
    assert m[("afm_draining", frozenset())] == 0


def test_tenant_is_the_keys_label_never_the_key(serve) -> None:
    named = "metrics-named-key"
    live = serve("Hello", api_keys=(KEY, ApiKey(named, name="acme")))
    auth = {"Authorization": f"Bearer {KEY}"}
    route = "/v1/chat/completions"
    assert post(live.url, {"messages": USER}, auth).status_code == 200
    assert post(live.url, {"messages": USER}, {"Authorization": f"Bearer {named}"}).status_code == 200
    assert post(live.url, {"messages": USER}, {"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(f"{live.url}/metrics", timeout=10).status_code == 401  # behind the key
    r = httpx.get(f"{live.url}/metrics", headers=auth, timeout=10)
    assert KEY not in r.text and named not in r.text
    m = samples(live.url, auth)
    tenant = ApiKey(KEY).tenant.label  # key-<12 hex of its SHA-256>
    assert tenant.startswith("key-") and KEY not in tenant
    assert total(m, "afm_requests_total", endpoint=route, status="200", tenant=tenant) == 1
    assert total(m, "afm_requests_total", endpoint=route, status="200", tenant="acme") == 1
    assert total(m, "afm_requests_total", endpoint="/metrics", status="200", tenant=tenant) == 1
    assert total(m, "afm_requests_total", endpoint=route, status="401", tenant="unauthenticated") == 1
    assert total(m, "afm_requests_total", endpoint="/metrics", status="401", tenant="unauthenticated") == 1


def test_503_cancel_and_disconnect_are_counted(serve) -> None:
    from afm_struct.testing import Script

    live = serve(Script("word " * 200, delay_s=0.02), max_active=1, max_queue=0)
    started = threading.Event()
    result: dict[str, object] = {}

    def long_stream() -> None:
        with httpx.stream("POST", f"{live.url}/v1/chat/completions", timeout=60,
                          headers={"X-Request-ID": "to-cancel"},
                          json={"messages": USER, "stream": True, "max_tokens": 150}) as r:
            for line in r.iter_lines():
                started.set()
                if line.startswith("data: ") and '"finish_reason":"cancelled"' in line.replace(" ", ""):
                    result["cancelled"] = True

    t = threading.Thread(target=long_stream)
    t.start()
    assert started.wait(30)
    busy = post(live.url, {"messages": USER})
    assert busy.status_code == 503
    assert httpx.post(f"{live.url}/v1/chat/completions/to-cancel/cancel", timeout=10).status_code == 200
    t.join(30)
    assert result.get("cancelled")
    # A client that leaves mid-stream.
    with httpx.stream("POST", f"{live.url}/v1/chat/completions", timeout=60,
                      json={"messages": USER, "stream": True, "max_tokens": 150}) as r:
        next(r.iter_lines())
    assert wait_until(lambda: len(live.state.registry) == 0)
    assert wait_until(lambda: total(samples(live.url), "afm_client_disconnects_total") == 1)
    m = samples(live.url)
    assert total(m, "afm_unavailable_responses_total", type="overloaded_error") == 1
    assert total(m, "afm_cancels_total") == 1
    # The client that left has no finish: its stream ended before one was reached.
    assert total(m, "afm_finish_reasons_total", reason="cancelled") == 1


@pytest.fixture
def request_log(caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, logger="afm_struct.requests")
    return caplog


def test_request_log_fields_without_content(serve, request_log) -> None:
    live = serve(DOC)
    secret = "my secret prompt text"
    r = post(live.url, {"messages": [{"role": "user", "content": secret}], "max_tokens": 40},
             {"X-Request-ID": "log-1"})
    assert r.status_code == 200
    assert wait_until(lambda: any(getattr(rec, "afm", {}).get("request_id") == "log-1"
                                  for rec in request_log.records))
    (rec,) = [rec for rec in request_log.records if getattr(rec, "afm", {}).get("request_id") == "log-1"]
    fields = rec.afm
    assert fields["endpoint"] == "/v1/chat/completions" and fields["status"] == 200
    assert fields["mode"] == "text" and fields["finish_reason"] == "stop"
    assert fields["prompt_tokens"] > 0 and fields["completion_tokens"] > 0
    assert fields["ttft_s"] is not None and fields["latency_s"] >= fields["ttft_s"]
    assert fields["client"].startswith("127.0.0.1:") and fields["tenant"] == "anonymous"
    from server.logging_json import JsonFormatter

    line = JsonFormatter().format(rec)
    assert "\n" not in line and secret not in line and "Ada" not in line
    parsed = json.loads(line)
    assert parsed["request_id"] == "log-1" and parsed["level"] == "info" and "ts" in parsed


def test_log_content_adds_prompt_and_output(serve, request_log) -> None:
    live = serve(DOC, log_content=True)
    r = post(live.url, {"messages": [{"role": "user", "content": "tell me"}], "max_tokens": 40},
             {"X-Request-ID": "log-2"})
    assert r.status_code == 200
    assert wait_until(lambda: any(getattr(rec, "afm", {}).get("request_id") == "log-2"
                                  for rec in request_log.records))
    (rec,) = [rec for rec in request_log.records if getattr(rec, "afm", {}).get("request_id") == "log-2"]
    assert "tell me" in rec.afm["content"]["prompt"] and rec.afm["content"]["output"] == DOC


def test_new_protocols_are_labelled_by_their_route_refused_or_not(serve) -> None:
    """/v1/completions and Ollama's routes count under their own endpoint, a 401 refused before
    routing included (matched against every route of the app, not chat's only)."""
    live = serve(DOC, api_keys=(ApiKey(KEY),))
    auth = {"Authorization": f"Bearer {KEY}"}
    ok = httpx.post(f"{live.url}/v1/completions", json={"prompt": "x"}, headers=auth, timeout=60)
    assert ok.status_code == 200
    refused = httpx.post(f"{live.url}/api/chat", json={}, headers={"Authorization": "Bearer no"})
    assert refused.status_code == 401
    m = samples(live.url, auth)
    assert total(m, "afm_requests_total", endpoint="/v1/completions", status="200") == 1
    assert total(m, "afm_requests_total", endpoint="/api/chat", status="401") == 1


def test_reasoning_tokens_are_the_thinking_blocks_tokens(serve, tokenizer) -> None:
    """The generator counts the tokens it reads while the request's turn is thinking: from the
    token that completes the open tag through the one that completes the close tag (the open
    tag's earlier tokens are read before the turn knows it is a tag), per tenant; an answer
    without a block adds none."""
    block, answer = "<think>hmm, let me see</think>", "Hello there!"
    live = serve(block + answer, reasoning="think")
    assert post(live.url, {"messages": USER, "max_tokens": 60}).status_code == 200
    m = samples(live.url)
    opening = len(tokenizer.encode("<think>")) - 1
    counted = total(m, "afm_reasoning_tokens_total", tenant="anonymous")
    assert counted == len(tokenizer.encode(block)) - opening
    plain = serve(answer)
    assert post(plain.url, {"messages": USER, "max_tokens": 60}).status_code == 200
    assert total(samples(plain.url), "afm_reasoning_tokens_total") == 0
