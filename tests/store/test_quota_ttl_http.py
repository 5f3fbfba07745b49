"""Per-tenant store quotas and expiry over real HTTP (scripted model, two API keys), on each
store (SQLite and PostgreSQL): a create that would take its tenant past the quota is a 429
before it runs (streamed or not), other tenants and store: false go on, a delete frees room;
an expired response is a 404 everywhere and frees its room; and the serve options that set
them."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from afm_struct.cli import build_parser
from afm_struct.cli.cluster import forwarded_args
from afm_struct.cli.serve import open_response_store
from afm_struct.store import open_store
from afm_struct.testing import Script, scripted_loaded_model
from server.live import LiveServer, start_server
from server.settings import ServerSettings
from tests.server.responses_client import post

KEY_A, KEY_B = "key-a-123", "key-b-456"
A, B = {"Authorization": f"Bearer {KEY_A}"}, {"Authorization": f"Bearer {KEY_B}"}


class Clock:
    """The real clock, moved forward by ``ahead`` seconds: the store ages what the server made."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def __call__(self) -> float:
        return time.time() + self.ahead


@pytest.fixture
def serve(tokenizer: Any, store_spec: str) -> Iterator[Callable[..., tuple[LiveServer, Clock]]]:
    """Factory: a scripted server with keys A and B on a new store of each kind."""
    started: list[LiveServer] = []

    def make(ttl_s: float | None = None, **quota: Any) -> tuple[LiveServer, Clock]:
        clock = Clock()
        live = start_server(scripted_loaded_model(tokenizer, "Hello there"),
                            ServerSettings(api_keys=(KEY_A, KEY_B), **quota),
                            response_store=open_store(store_spec, ttl_s=ttl_s, clock=clock))
        started.append(live)
        return live, clock

    yield make
    for live in started:
        live.stop()


def _refused(r: httpx.Response) -> str:
    assert r.status_code == 429, r.text
    error = r.json()["error"]
    assert (error["type"], error["code"]) == ("insufficient_quota", "store_quota_exceeded")
    assert "store: false" in error["message"] and "DELETE /v1/responses" in error["message"]
    return str(error["message"])


def _stored_ids(live: LiveServer, ids: list[str], headers: dict[str, str]) -> list[str]:
    return [i for i in ids if httpx.get(f"{live.url}/v1/responses/{i}", headers=headers).status_code == 200]


def test_the_response_quota_is_per_tenant_and_refused_before_the_run(serve) -> None:
    live, _ = serve(store_quota_responses=2)
    kept = [post(live.url, {"input": f"hi {n}"}, A).json()["id"] for n in range(2)]
    message = _refused(post(live.url, {"input": "one more"}, A))
    assert "2 stored responses" in message and "quota is 2" in message
    with httpx.stream("POST", f"{live.url}/v1/responses", json={"input": "x", "stream": True},
                      headers=A, timeout=60) as streamed:
        streamed.read()
        _refused(streamed)  # before the headers: no event stream begins
    # store: false keeps nothing, so the quota does not apply; another tenant has its own.
    assert post(live.url, {"input": "hi", "store": False}, A).status_code == 200
    assert all(post(live.url, {"input": "hi"}, B).status_code == 200 for _ in range(2))
    assert _stored_ids(live, kept, A) == kept  # nothing was replaced nor lost
    assert httpx.delete(f"{live.url}/v1/responses/{kept[0]}", headers=A).status_code == 200
    assert post(live.url, {"input": "room again"}, A).status_code == 200


def test_the_byte_quota_counts_what_a_request_would_add(serve) -> None:
    live, _ = serve(store_quota_bytes=20_000)
    big = post(live.url, {"input": "x" * 12_000}, A)
    assert big.status_code == 200
    message = _refused(post(live.url, {"input": "y" * 12_000}, A))
    assert "20,000 bytes" in message
    assert post(live.url, {"input": "small"}, A).status_code == 200  # what still fits is kept
    assert post(live.url, {"input": "y" * 12_000, "store": False}, A).status_code == 200


def test_a_refused_request_never_runs(tokenizer: Any, store_spec: str) -> None:
    prompts: list[list[int]] = []

    def answer(ids: list[int]) -> str:  # called once per generation
        prompts.append(ids)
        return "Hello there"

    live = start_server(scripted_loaded_model(tokenizer, Script(answer)),
                        ServerSettings(store_quota_responses=1), response_store=open_store(store_spec))
    try:
        assert post(live.url, {"input": "hi"}).status_code == 200
        runs = len(prompts)
        assert runs >= 1
        _refused(post(live.url, {"input": "hi"}))
        assert len(prompts) == runs
    finally:
        live.stop()


def test_a_compaction_is_kept_within_the_quota(serve) -> None:
    # A compaction is kept like a response, so the tenant's quota bounds it too.
    live, _ = serve(store_quota_responses=1)
    body = {"model": "scripted", "input": "hi"}
    first = httpx.post(f"{live.url}/v1/responses/compact", json=body, headers=A, timeout=60)
    assert first.status_code == 200, first.text
    _refused(httpx.post(f"{live.url}/v1/responses/compact", json=body, headers=A, timeout=60))
    assert _stored_ids(live, [first.json()["id"]], A) == [first.json()["id"]]
    assert httpx.post(f"{live.url}/v1/responses/compact", json=body, headers=B, timeout=60).status_code == 200


def test_an_expired_response_is_gone_and_frees_its_room(serve) -> None:
    live, clock = serve(ttl_s=3600, store_quota_responses=1)
    first = post(live.url, {"input": "hi"}, A).json()
    assert httpx.get(f"{live.url}/v1/responses/{first['id']}", headers=A).json() == first
    _refused(post(live.url, {"input": "again"}, A))
    clock.ahead = 3602  # past the ttl (created_at is whole seconds)
    for method, path in (("GET", ""), ("GET", "/input_items"), ("DELETE", "")):
        r = httpx.request(method, f"{live.url}/v1/responses/{first['id']}{path}", headers=A)
        assert r.status_code == 404 and first["id"] in r.json()["error"]["message"], r.text
    r = post(live.url, {"input": "next", "previous_response_id": first["id"]}, A)
    assert r.status_code == 404 and r.json()["error"]["param"] == "previous_response_id"
    second = post(live.url, {"input": "after expiry"}, A)  # the expired one no longer counts
    assert second.status_code == 200, second.text
    # The clock set back: the second is kept, and the first was purged when the second was
    # written (not merely hidden).
    clock.ahead = 0
    assert httpx.get(f"{live.url}/v1/responses/{second.json()['id']}", headers=A).status_code == 200
    assert httpx.get(f"{live.url}/v1/responses/{first['id']}", headers=A).status_code == 404


def test_the_serve_options_set_the_ttl_and_quotas(tmp_path: Path) -> None:
    parser = build_parser()
    path = str(tmp_path / "r.sqlite3")
    for given, ttl in (([], 30 * 86400), (["--store-ttl", "2h"], 7200), (["--store-ttl", "90"], 90),
                       (["--store-ttl", "1.5d"], 129600), (["--store-ttl", "0"], None)):
        args = parser.parse_args(["serve", "--responses-store", path, *given])
        store = open_response_store(args)
        assert store.ttl_s == ttl
        store.close()
    args = parser.parse_args(["serve", "--store-quota-responses", "50", "--store-quota-bytes", "500M"])
    assert (args.store_quota_responses, args.store_quota_bytes) == (50, 500 << 20)
    assert parser.parse_args(["serve", "--store-quota-bytes", "0"]).store_quota_bytes == 0
    for bad in (["--store-ttl", "soon"], ["--store-ttl", "-1"], ["--store-quota-bytes", "1.5"],
                ["--store-quota-responses", "-3"], ["--store-ttl", "inf"]):
        with pytest.raises(SystemExit):
            parser.parse_args(["serve", *bad])
    defaults = ServerSettings()
    assert (defaults.store_quota.responses, defaults.store_quota.bytes) == (100_000, 1 << 30)
    unbounded = ServerSettings(store_quota_responses=0, store_quota_bytes=0).store_quota
    assert (unbounded.responses, unbounded.bytes) == (None, None)
    cluster = parser.parse_args(["cluster", "--store-ttl", "1d", "--store-quota-bytes", "2G"])
    again = parser.parse_args(["serve", *forwarded_args(cluster, cluster.serve_actions)])
    assert (again.store_ttl, again.store_quota_bytes) == (86400, 2 << 30)  # the replicas get them
