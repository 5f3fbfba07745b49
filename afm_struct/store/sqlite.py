"""The embedded response store: one SQLite file, shared by the replicas of one host.

The file is in WAL mode, so readers never wait for a writer and several processes (the
replicas ``afm-struct cluster`` starts) can use it at once; a writer waits up to
:data:`BUSY_TIMEOUT_S` for another.  Every commit is synced (``synchronous=FULL``), so a
killed process loses nothing it stored, and deleted rows are overwritten (``secure_delete``),
so a deleted response does not linger in the file.  WAL needs shared memory between the
processes: keep the file on a local disk, not a network share (use PostgreSQL across hosts).

Opening checks everything a request would need (the file is a database of a schema this code
knows, and it can be written), so a bad path fails at start-up with a message naming it, not
with a 503 per request.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from . import migrations
from .records import StoreError
from .sql import SqlStore

log = logging.getLogger(__name__)
BUSY_TIMEOUT_S = 30.0


class SQLiteStore(SqlStore):
    """:class:`~.protocol.ResponseStore` in the SQLite file at ``path`` (created with its
    directory if missing).  Raises :class:`~.records.StoreError` naming the path when the file
    cannot be used.  Responses older than ``ttl_s`` seconds (by ``clock``; None: kept for
    ever) are not returned and are purged."""

    def __init__(self, path: str | os.PathLike[str], *, ttl_s: float | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        self._expiry(ttl_s, clock)
        self.path = Path(path).expanduser()
        self.description = f"SQLite file {self.path}"
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = _open(self.path)

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[sqlite3.Cursor]:
        with self._lock:
            if self._conn is None:
                raise StoreError("the response store is closed")
            cur = self._conn.cursor()
            try:
                # IMMEDIATE takes the write lock now: a deferred write transaction that reads
                # first could fail on upgrade instead of waiting for another writer.
                cur.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                try:
                    yield cur
                except BaseException:
                    _rollback(self._conn)
                    raise
                cur.execute("COMMIT")
            except sqlite3.Error as exc:
                log.error("response store %s: %s", self.path, exc)
                raise StoreError("the response store is unavailable; try again later") from None
            finally:
                cur.close()

    def close(self) -> None:
        """Close the connection (the last one out checkpoints the WAL into the file)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _open(path: Path) -> sqlite3.Connection:
    """A connection to ``path`` in WAL mode with the schema migrated, or StoreError."""
    fix = "give --responses-store a writable file path, or --no-store"
    if path.is_dir():
        raise StoreError(f"the response store {path} is a directory; {fix}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create the directory of the response store {path}: "
                         f"{exc.strerror or exc}; {fix}") from None
    conn = None
    try:
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                               check_same_thread=False)
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode != "wal":
            raise StoreError(f"the response store {path} cannot use SQLite's WAL mode (it stays "
                             f"in {mode!r} mode); put it on a local disk, or use PostgreSQL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA secure_delete = ON")
        conn.execute("BEGIN IMMEDIATE")
        try:
            applied = migrations.apply(conn.cursor(), "sqlite", "?")
            # A write on every open, even with nothing to migrate: a file or directory this
            # process cannot write is found now, not by the first request that stores.
            conn.execute(f"PRAGMA user_version = {migrations.LATEST}")
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
    except migrations.NewerSchemaError as exc:
        _close(conn)
        raise StoreError(f"cannot use the response store {path}: {exc}; upgrade afm-struct or "
                         "give --responses-store another file") from None
    except StoreError:
        _close(conn)
        raise
    except sqlite3.DatabaseError as exc:
        _close(conn)
        raise StoreError(f"the response store {path} {_why(exc)}; {fix}") from None
    if applied:
        log.info("response store %s: schema migrated to version %d", path, migrations.LATEST)
    return conn


def _why(exc: sqlite3.DatabaseError) -> str:
    """What went wrong, in the operator's terms."""
    text = str(exc)
    if "not a database" in text or "malformed" in text:
        return "is not a usable SQLite database (corrupt, or another kind of file); move it away"
    if "readonly" in text or "unable to open" in text or "disk I/O" in text:
        return f"cannot be written ({text}): check the permissions of the file and its directory"
    return f"cannot be opened ({text})"


def _close(conn: sqlite3.Connection | None) -> None:
    if conn is not None:
        conn.close()


def _rollback(conn: sqlite3.Connection) -> None:
    # After some errors SQLite has already rolled back; the first error is the one to report.
    try:
        conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass
