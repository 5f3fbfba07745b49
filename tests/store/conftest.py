"""Fixtures of the response store tests: each store kind, opened on a fresh database.

``store_spec`` is parametrized over the two implementations: a SQLite file in the test's temp
dir, and a new database on a real PostgreSQL server (one per session, started from Debian's
binaries; those cases skip with the reason where it cannot run).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from afm_struct.store import ResponseStore, open_store
from tests.postgres_server import PostgresServer, unavailable_reason

KINDS = ("sqlite", "postgresql")
_databases = itertools.count()


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server for the session (skips with the reason where there is none)."""
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.stop()


def new_spec(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A ``--responses-store`` value naming a new, empty store of ``kind``."""
    if kind == "sqlite":
        return str(tmp_path / f"responses-{next(_databases)}.sqlite3")
    server: PostgresServer = request.getfixturevalue("postgres")
    return server.create_schema(f"store_{next(_databases)}")


@pytest.fixture(params=KINDS)
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new, empty store of each kind, as its ``--responses-store`` value."""
    return new_spec(request.param, tmp_path, request)


@pytest.fixture
def pg_spec(postgres: PostgresServer) -> str:
    """A new, empty PostgreSQL store, as its ``--responses-store`` URL."""
    return postgres.create_schema(f"store_{next(_databases)}")


@pytest.fixture
def reopen(store_spec: str) -> Iterator[Callable[[], ResponseStore]]:
    """Opens the store of ``store_spec`` (as a restarted server would); all closed at the end."""
    opened: list[ResponseStore] = []

    def open_again() -> ResponseStore:
        opened.append(open_store(store_spec))
        return opened[-1]

    yield open_again
    for store in opened:
        store.close()


@pytest.fixture
def store(reopen: Callable[[], ResponseStore]) -> ResponseStore:
    """A new, empty store of each kind."""
    return reopen()
