"""Stored responses (the Responses API's ``store``), each kept with its owner.

:class:`~.protocol.ResponseStore` is the interface; :func:`open_store` opens one from the
``--responses-store`` value: a file path for the embedded SQLite store (one host; its replicas
share the file), or a ``postgresql://`` URL for a store shared by hosts.  Owners are opaque
strings (the server uses its tenants' ``owner``: a key's name or hash, never the key).
"""

from __future__ import annotations

import os
from pathlib import Path

from .protocol import ResponseStore
from .records import DEFAULT_LIMIT, MAX_LIMIT, Item, ItemPage, StoredResponse, StoreError, not_found

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "Item", "ItemPage", "ResponseStore", "StoreError",
           "StoredResponse", "default_store_path", "is_postgres_url", "not_found", "open_store"]

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def default_store_path() -> Path:
    """Where the SQLite store lives by default: ``$XDG_DATA_HOME/afm-struct/responses.sqlite3``
    (``~/.local/share`` when the variable is unset), one file for every server of this user."""
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "afm-struct" / "responses.sqlite3"


def is_postgres_url(spec: str) -> bool:
    """Whether ``spec`` names a PostgreSQL database rather than a file."""
    return spec.startswith(_POSTGRES_SCHEMES)


def open_store(spec: str | os.PathLike[str] | None = None) -> ResponseStore:
    """The store ``spec`` names (a ``postgresql://`` URL, or a SQLite file path; None: the
    default path), opened and migrated.  Raises :class:`StoreError` with a message naming the
    path (or the URL without its password) when it cannot be used."""
    if isinstance(spec, str) and is_postgres_url(spec):
        from .postgres import PostgresStore

        return PostgresStore(spec)
    from .sqlite import SQLiteStore

    return SQLiteStore(default_store_path() if spec is None else spec)
