"""Expiry (a store's ttl) and per-owner usage, on every implementation (SQLite and PostgreSQL):
an expired response is gone for every call exactly as a deleted one, its rows are purged by
the next write, usage counts live responses and the bytes they take, and a database of the
first schema gets its sizes measured when migrated."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from afm_struct.errors import NotFoundError
from afm_struct.store import (
    QuotaExceededError,
    ResponseStore,
    StoredResponse,
    StoreQuota,
    StoreUsage,
    migrations,
    open_store,
    stored_size,
)

from .test_interface import A, B, contents, response

T0 = 1_700_000_000
TTL = 3600


class Clock:
    """A clock the test moves (Unix seconds)."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def aged(id: str, created_at: int, owner: str = A, previous: str | None = None) -> StoredResponse:
    base = response(id, owner, previous=previous)
    return StoredResponse(id=base.id, owner=owner, status="completed", created_at=created_at, model="m",
                          input_items=base.input_items, output_items=base.output_items,
                          previous_response_id=previous)


def rows(store: ResponseStore, sql: str) -> int:
    """One number from the store's own database, read behind its back."""
    with store._transaction(write=False) as cur:  # type: ignore[attr-defined]
        return int(store._run(cur, sql).fetchone()[0])  # type: ignore[attr-defined]


def test_an_expired_response_is_gone_as_a_deleted_one_and_purged(store_spec: str) -> None:
    clock = Clock()
    store = open_store(store_spec, ttl_s=TTL, clock=clock)
    try:
        store.put(aged("old", T0))
        store.put(aged("old", T0, B))
        store.put(aged("next", T0 + 1800, previous="old"))
        assert contents(store.conversation(A, "next")) == ["old in 0", "old out 0", "next in 0", "next out 0"]
        clock.now = T0 + TTL  # "old" is exactly one ttl old: still kept
        assert store.get(A, "old").id == "old"
        clock.now = T0 + TTL + 1  # now older than the ttl
        for call in (lambda: store.get(A, "old"), lambda: store.delete(A, "old"),
                     lambda: store.input_items(A, "old"), lambda: store.conversation(A, "old"),
                     lambda: store.put(aged("third", T0 + TTL, previous="old"))):
            with pytest.raises(NotFoundError) as err:
                call()
            assert "expired" in err.value.message
        # The chain of the live response ends in the gap the expiry left, as after a delete.
        with pytest.raises(NotFoundError):
            store.conversation(A, "next")
        assert store.get(A, "next").id == "next"
        assert rows(store, "SELECT COUNT(*) FROM responses") == 3  # expired, not yet purged
        store.put(aged("fresh", int(clock.now)))  # a write purges both owners' expired rows
        assert rows(store, "SELECT COUNT(*) FROM responses") == 2
        assert rows(store, "SELECT COUNT(*) FROM response_items") == 4  # 2 each for next and fresh
        clock.now += TTL
        assert store.purge() == 1  # "next"; "fresh" is exactly one ttl old
        assert store.purge() == 0
    finally:
        store.close()


def test_expired_rows_are_purged_when_the_store_opens(store_spec: str) -> None:
    store = open_store(store_spec)
    store.put(aged("r1", T0))
    store.put(aged("r2", T0 + 10))
    store.close()
    reopened = open_store(store_spec, ttl_s=5, clock=Clock(T0 + 12))
    try:
        assert rows(reopened, "SELECT COUNT(*) FROM responses") == 1
        assert reopened.get(A, "r2").id == "r2"
    finally:
        reopened.close()


def test_without_a_ttl_nothing_expires(store: ResponseStore) -> None:
    store.put(aged("r", 0))
    assert store.purge() == 0
    assert store.get(A, "r").created_at == 0


def test_usage_counts_live_responses_and_their_bytes(store_spec: str) -> None:
    clock = Clock()
    store = open_store(store_spec, ttl_s=TTL, clock=clock)
    try:
        assert store.usage(A) == StoreUsage(0, 0)
        first = store.put(aged("r1", T0))
        one = stored_size(first.metadata, first.extra, [*first.input_items, *first.output_items])
        assert store.usage(A) == StoreUsage(1, one)
        second = store.put(StoredResponse(id="r2", owner=A, status="completed", created_at=T0 + 10,
                                          model="m", metadata={"k": "é" * 100},
                                          input_items=[{"type": "message", "content": "☃" * 1000}]))
        two = stored_size(second.metadata, second.extra, second.input_items)
        assert two > 3000  # UTF-8 bytes, not characters
        assert store.usage(A) == StoreUsage(2, one + two)
        assert store.usage(B) == StoreUsage(0, 0)  # per owner
        store.put(aged("r1", T0))  # a replacement is counted once
        assert store.usage(A) == StoreUsage(2, one + two)
        store.delete(A, "r2")
        assert store.usage(A) == StoreUsage(1, one)
        clock.now = T0 + TTL + 1
        assert store.usage(A) == StoreUsage(0, 0)  # expired does not count, purged or not
    finally:
        store.close()


def test_the_quota_refuses_what_would_go_past_it() -> None:
    quota = StoreQuota(responses=2, bytes=1000)
    quota.check(StoreUsage(1, 500), 500)  # exactly at both bounds after it
    with pytest.raises(QuotaExceededError) as err:
        quota.check(StoreUsage(2, 0), 1)
    assert err.value.status == 429 and err.value.code == "store_quota_exceeded"
    assert "quota is 2" in err.value.message and "store: false" in err.value.message
    with pytest.raises(QuotaExceededError) as err:
        quota.check(StoreUsage(1, 600), 401)
    assert "1,000 bytes" in err.value.message and "DELETE /v1/responses" in err.value.message
    StoreQuota().check(StoreUsage(10**9, 10**15), 10**9)  # no bounds
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError):
            StoreQuota(responses=bad)  # type: ignore[arg-type]


def test_a_first_schema_database_gets_its_sizes_measured(tmp_path: Path) -> None:
    path = tmp_path / "v1.sqlite3"
    with sqlite3.connect(path) as conn:  # the database an afm-struct of schema 1 wrote
        cur = conn.cursor()
        cur.execute(migrations.LEDGER)
        version, description, scripts = migrations.MIGRATIONS[0]
        for statement in filter(str.strip, scripts["sqlite"].split(";")):
            cur.execute(statement)
        cur.execute("INSERT INTO schema_migrations VALUES (?, ?, 0)", (version, description))
        cur.execute("INSERT INTO responses (owner, id, status, created_at, model, metadata, extra) "
                    "VALUES (?, 'r', 'completed', ?, 'm', '{}', '{\"a\":1}')", (A, T0))
        cur.execute("INSERT INTO response_items VALUES (1, 'input', 0, 'i', ?)",
                    (json.dumps({"id": "i", "text": "hello"}),))
    store = open_store(path)
    try:
        item = json.dumps({"id": "i", "text": "hello"})
        assert store.usage(A) == StoreUsage(1, len("{}") + len('{"a":1}') + len(item))
    finally:
        store.close()
