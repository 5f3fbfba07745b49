"""Tenants cannot touch each other's requests (issue 32): two API keys, real HTTP, scripted model.

A cancel by a key that is not the request's owner answers exactly as for an unknown ID, and the
owner's stream goes on untouched; request-ID uniqueness (409) is per owner, so two tenants may
use the same client-chosen ID without colliding or learning of each other.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import given

from afm_struct.testing import Script
from server.tenants import ApiKey

from ..tenant_traffic import Plan, plans, run_plan, traffic_settings
from .conftest import USER, decode

KEY_A, KEY_B = "key-alpha-0123456789", "key-bravo-0123456789"
# ~40 steps of 20 ms: long enough to be in flight while the other tenant acts.
WORDS = " ".join(f"w{i}" for i in range(40))


def _auth(key: str, request_id: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {key}"}
    if request_id is not None:
        headers["X-Request-ID"] = request_id
    return headers


def _cancel(url: str, key: str | None, request_id: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions/{request_id}/cancel",
                      headers=_auth(key) if key else {})


def _as_unknown(response: httpx.Response, url: str, key: str | None, request_id: str) -> None:
    """``response`` is exactly what an ID this server never saw gets (status, body, headers
    beyond the per-request ones)."""
    never = f"never-{request_id}"
    unknown = _cancel(url, key, never)
    assert unknown.status_code == 404
    expected = json.loads(unknown.text.replace(never, request_id))
    assert response.status_code == 404 and response.json() == expected, response.text
    assert sorted(response.headers.keys()) == sorted(unknown.headers.keys())


class Stream:
    """A streamed completion held open: its events are read at :meth:`finish`."""

    def __init__(self, url: str, key: str | None, request_id: str, **body: Any) -> None:
        self._cm = httpx.stream("POST", f"{url}/v1/chat/completions", timeout=30,
                                json={"messages": USER, "stream": True, **body},
                                headers=_auth(key, request_id) if key else {"X-Request-ID": request_id})
        self.response = self._cm.__enter__()
        self.status = self.response.status_code
        self._lines: Iterator[str] = self.response.iter_lines()
        self.payloads: list[str] = []
        if self.status == 200:  # the first event: the request is running
            self.payloads.append(next(line for line in self._lines if line.startswith("data: "))[6:])

    def finish(self) -> list[dict[str, Any]]:
        """The events to the end ([DONE] checked)."""
        try:
            self.payloads += [line[6:] for line in self._lines if line.startswith("data: ")]
        finally:
            self._cm.__exit__(None, None, None)
        return decode(self.payloads)


def _finish_reason(events: list[dict[str, Any]]) -> str:
    return next(e["choices"][0]["finish_reason"] for e in reversed(events)
                if e["choices"] and e["choices"][0]["finish_reason"])


def _content(events: list[dict[str, Any]]) -> str:
    return "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])


@pytest.fixture
def url(serve: Any) -> str:
    live = serve(Script(WORDS, delay_s=0.02), api_keys=(KEY_A, KEY_B))
    return live.url  # type: ignore[no-any-return]


def test_another_tenants_cancel_is_an_unknown_id_and_the_stream_runs_on(url: str) -> None:
    victim = Stream(url, KEY_A, "victim-123")
    assert victim.status == 200
    attempt = _cancel(url, KEY_B, "victim-123")
    _as_unknown(attempt, url, KEY_B, "victim-123")
    events = victim.finish()
    assert _finish_reason(events) == "stop"  # untouched: the whole script, not cancelled
    assert _content(events) == WORDS


def test_the_owner_still_cancels_its_own_request(url: str) -> None:
    mine = Stream(url, KEY_A, "mine-1")
    assert _cancel(url, KEY_B, "mine-1").status_code == 404
    owner = _cancel(url, KEY_A, "mine-1")
    assert owner.status_code == 200 and owner.json()["cancelled"] is True
    assert _finish_reason(mine.finish()) == "cancelled"


def test_request_ids_are_unique_per_owner(url: str) -> None:
    """Both tenants run ``shared-7`` at once; each cancel reaches its owner's request only; a
    second ``shared-7`` of the same tenant is still a 409."""
    a = Stream(url, KEY_A, "shared-7")
    b = Stream(url, KEY_B, "shared-7")
    assert (a.status, b.status) == (200, 200), b.response.read()
    again = httpx.post(f"{url}/v1/chat/completions", json={"messages": USER, "max_tokens": 2},
                       headers=_auth(KEY_A, "shared-7"))
    assert again.status_code == 409 and again.json()["error"]["code"] == "duplicate_request_id"
    assert _cancel(url, KEY_B, "shared-7").status_code == 200
    b_events = b.finish()
    assert _finish_reason(b_events) == "cancelled"
    a_events = a.finish()
    assert _finish_reason(a_events) == "stop" and _content(a_events) == WORDS


def test_a_completed_request_of_another_tenant_is_unknown_too(url: str) -> None:
    """The owner hears "has already completed"; anyone else hears the unknown-ID answer."""
    done = httpx.post(f"{url}/v1/chat/completions", json={"messages": USER, "max_tokens": 2},
                      headers=_auth(KEY_A, "done-9"), timeout=30)
    assert done.status_code == 200
    assert "completed" in _cancel(url, KEY_A, "done-9").json()["error"]["message"]
    _as_unknown(_cancel(url, KEY_B, "done-9"), url, KEY_B, "done-9")


def test_without_keys_every_caller_is_one_tenant_as_before(serve: Any) -> None:
    """No keys configured: a cancel reaches the request whatever Authorization it carries."""
    live = serve(Script(WORDS, delay_s=0.02))
    s = Stream(live.url, None, "open-1")
    r = httpx.post(f"{live.url}/v1/chat/completions/open-1/cancel",
                   headers={"Authorization": "Bearer whatever"})
    assert r.status_code == 200 and r.json()["cancelled"] is True
    assert _finish_reason(s.finish()) == "cancelled"


def test_named_keys_label_the_logs_never_the_key(serve: Any, caplog: pytest.LogCaptureFixture) -> None:
    live = serve(Script(WORDS, delay_s=0.02),
                 api_keys=(ApiKey(KEY_A, name="acme"), KEY_B))
    with caplog.at_level(logging.INFO, logger="afm_struct.server"):
        a = Stream(live.url, KEY_A, "log-1")
        assert _cancel(live.url, KEY_A, "log-1").status_code == 200
        a.finish()
        b = Stream(live.url, KEY_B, "log-2")
        assert _cancel(live.url, KEY_B, "log-2").status_code == 200
        b.finish()
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "request log-1 cancelled (tenant acme)" in text
    assert "request log-2 cancelled (tenant key-" in text
    assert KEY_A not in text and KEY_B not in text


def test_health_is_open_and_shows_no_tenant(url: str) -> None:
    """/health (docs/deploy.md, Security): status, version, model, device, aggregate load,
    uptime and memory; no request ID, key, owner or tenant name."""
    s = Stream(url, KEY_A, "victim-health")
    health = httpx.get(f"{url}/health")
    assert health.status_code == 200
    body = health.json()
    assert set(body) == {"status", "version", "model", "device", "requests_in_flight", "capacity",
                         "uptime_s", "rss_bytes"}
    assert body["requests_in_flight"] >= 1
    for secret in ("victim-health", KEY_A, "key-alpha", "tenant", "owner"):
        assert secret not in health.text
    assert _cancel(url, KEY_A, "victim-health").status_code == 200
    s.finish()


_EXAMPLES = itertools.count()
TENANT_KEYS = ("key-t0-0123456789", "key-t1-0123456789", "key-t2-0123456789")


def test_random_cancels_never_reach_another_tenant(serve: Any) -> None:
    """Three tenants, IDs from a small shared pool, random cancels (tests/tenant_traffic.py)."""
    live = serve(Script(WORDS, delay_s=0.02), api_keys=TENANT_KEYS)

    @traffic_settings(default_examples=8)
    @given(plan=plans(len(TENANT_KEYS)))
    def check(plan: Plan) -> None:
        asyncio.run(run_plan(live.url, TENANT_KEYS, plan, {"messages": USER, "max_tokens": 24},
                             f"e{next(_EXAMPLES)}-"))

    check()
    assert len(live.state.registry) == 0
