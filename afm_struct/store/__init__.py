"""Stored responses (the Responses API's ``store``), each kept with its owner.

:class:`~.protocol.ResponseStore` is the interface; :func:`open_store` opens one from the
``--responses-store`` value: a file path for the embedded SQLite store (one host; its replicas
share the file), or a ``postgresql://`` URL for a store shared by hosts.  Owners are opaque
strings (the server uses its tenants' ``owner``: a key's name or hash, never the key).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from .protocol import ResponseStore
from .records import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    Item,
    ItemPage,
    QuotaExceededError,
    StoredResponse,
    StoreError,
    StoreQuota,
    StoreUsage,
    not_found,
    stored_size,
)

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "Item", "ItemPage", "QuotaExceededError", "ResponseStore",
           "StoreError", "StoreQuota", "StoreUsage", "StoredResponse", "default_store_path",
           "is_postgres_url", "not_found", "open_store", "stored_size"]
log = logging.getLogger(__name__)

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def default_store_path() -> Path:
    """Where the SQLite store lives by default: ``$XDG_DATA_HOME/afm-struct/responses.sqlite3``
    (``~/.local/share`` when the variable is unset), one file for every server of this user."""
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "afm-struct" / "responses.sqlite3"


def is_postgres_url(spec: str) -> bool:
    """Whether ``spec`` names a PostgreSQL database rather than a file."""
    return spec.startswith(_POSTGRES_SCHEMES)


def open_store(spec: str | os.PathLike[str] | None = None, *, ttl_s: float | None = None,
               clock: Callable[[], float] | None = None) -> ResponseStore:
    """The store ``spec`` names (a ``postgresql://`` URL, or a SQLite file path; None: the
    default path), opened and migrated; with ``ttl_s``, responses older than that many seconds
    (by ``clock``, default ``time.time``) are not returned, and those already expired are
    purged now.  Raises :class:`StoreError` with a message naming the path (or the URL without
    its password) when it cannot be used."""
    store: ResponseStore
    if isinstance(spec, str) and is_postgres_url(spec):
        from .postgres import PostgresStore

        store = PostgresStore(spec, ttl_s=ttl_s, clock=clock)
    else:
        from .sqlite import SQLiteStore

        store = SQLiteStore(default_store_path() if spec is None else spec, ttl_s=ttl_s, clock=clock)
    try:
        purged = store.purge()
    except BaseException:
        store.close()
        raise
    if purged:
        log.info("response store %s: %d expired responses purged", store.description, purged)
    return store
