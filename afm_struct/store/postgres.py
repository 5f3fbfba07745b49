"""The shared response store: a PostgreSQL database, for replicas on several hosts.

``--responses-store postgresql://user:password@host:5432/dbname`` (any libpq URL).  The schema
is created and migrated at start-up under an advisory lock, so replicas starting together
migrate once.  Each store holds one connection (a replica's store calls are short and few
next to generation); a broken connection is replaced on the next call, the failed call
answering 503 ``store_unavailable``.  Needs psycopg 3: ``pip install 'afm-struct[postgres]'``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from . import migrations
from .records import StoredResponse, StoreError
from .sql import SqlStore

log = logging.getLogger(__name__)
CONNECT_TIMEOUT_S = 10
# pg_advisory_xact_lock key of the migrations ("afm" "rs" in ASCII).
_MIGRATION_LOCK = 0x61666D7273
# Attempts of one put racing another put creating the same (owner, id): the loser's insert
# fails on the unique key, and its next attempt finds the row and replaces it.
_PUT_ATTEMPTS = 3


class _Conflict(Exception):
    """A concurrent transaction wrote the same row first: run the put again."""


class PostgresStore(SqlStore):
    """:class:`~.protocol.ResponseStore` in the PostgreSQL database ``url``.  Raises
    :class:`~.records.StoreError` naming the database (never the password) when it cannot be
    reached or migrated.  Responses older than ``ttl_s`` seconds (by ``clock``; None: kept for
    ever) are not returned and are purged."""

    placeholder = "%s"
    lock_row = " FOR UPDATE"
    # Replicas sharing a batch claim disjoint lines without waiting on each other's claims.
    claim_lock = " FOR UPDATE SKIP LOCKED"

    def __init__(self, url: str, *, ttl_s: float | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        self._expiry(ttl_s, clock)
        try:
            import psycopg
        except ImportError:
            raise StoreError("a postgresql:// response store needs psycopg 3: "
                             "pip install 'afm-struct[postgres]' (or 'psycopg[binary]')") from None
        self._psycopg = psycopg
        self._url = url
        self.description = describe(url)
        self._lock = threading.Lock()
        self._conn: Any = None
        self._closed = False
        try:
            self._conn = self._connect()
            with self._conn.transaction(), self._conn.cursor() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                applied = migrations.apply(cur, "postgresql", "%s")
        except migrations.NewerSchemaError as exc:
            self.close()
            raise StoreError(f"cannot use the response store ({self.description}): {exc}; "
                             "upgrade afm-struct") from None
        except psycopg.Error as exc:
            self.close()
            raise StoreError(f"cannot use the response store ({self.description}): "
                             f"{_redact(' '.join(str(exc).split()), url)}; check --responses-store and that "
                             "the server is running and accepts this user") from None
        if applied:
            log.info("response store %s: schema migrated to version %d", self.description,
                     migrations.LATEST)

    def _connect(self) -> Any:
        return self._psycopg.connect(self._url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)

    def put(self, response: StoredResponse) -> StoredResponse:
        """See :meth:`.protocol.ResponseStore.put` (retried when a concurrent put of the same
        id commits first)."""
        for attempt in range(_PUT_ATTEMPTS):
            try:
                return super().put(response)
            except _Conflict:
                if attempt == _PUT_ATTEMPTS - 1:
                    raise StoreError("the response store is busy; try again later") from None
        raise AssertionError("unreachable")

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[Any]:
        psycopg = self._psycopg
        with self._lock:
            if self._closed:
                raise StoreError("the response store is closed")
            try:
                if self._conn is None or self._conn.closed or self._conn.broken:
                    self._conn = self._connect()
                with self._conn.transaction(), self._conn.cursor() as cur:
                    yield cur
            except (psycopg.errors.UniqueViolation, psycopg.errors.SerializationFailure):
                raise _Conflict() from None
            except psycopg.Error as exc:
                log.error("response store %s: %s", self.description, _redact(str(exc), self._url))
                raise StoreError("the response store is unavailable; try again later") from None

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            self._closed = True
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def describe(url: str) -> str:
    """The database ``url`` names, for messages: never its password."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(url)
    except Exception:  # an unparsable URL: say nothing of its contents
        return "PostgreSQL database (unparsable URL)"
    where = f"{parts.get('host', 'localhost')}:{parts.get('port', 5432)}"
    return f"PostgreSQL database {parts.get('dbname', '?')!s} on {where} as {parts.get('user', '?')!s}"


def _redact(text: str, url: str) -> str:
    """``text`` without the URL's password (a driver message may quote the URL)."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        password = conninfo_to_dict(url).get("password")
    except Exception:
        return text
    return text.replace(str(password), "***") if password else text
