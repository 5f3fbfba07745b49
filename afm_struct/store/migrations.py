"""The stores' schema, as numbered migrations recorded in a ``schema_migrations`` table.

A database records every migration applied to it.  Opening a store applies the missing ones,
in order, inside one write transaction that the caller holds exclusively (SQLite's ``BEGIN
IMMEDIATE``, PostgreSQL's advisory lock): two processes opening a new database at once, one
migrates and the other then finds it done.  A database recording a version this code does not
know was written by a newer afm-struct: it is refused rather than misread.  Append migrations;
never edit a released one.

A response is keyed by (owner, id): ids are unique per owner, not across owners.  Its items
hang off the response's surrogate ``seq``, so replacing a response replaces its items.  Items
and JSON fields are stored as text, keeping each item's keys in the order they were given.
"""

from __future__ import annotations

import time
from typing import Any, Literal

Dialect = Literal["sqlite", "postgresql"]

_V1 = """
    CREATE TABLE responses (
        seq {seq},
        owner TEXT NOT NULL,
        id TEXT NOT NULL,
        status TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        model TEXT NOT NULL,
        metadata TEXT NOT NULL,
        previous_response_id TEXT,
        extra TEXT NOT NULL,
        UNIQUE (owner, id)
    );
    CREATE INDEX responses_by_age ON responses (created_at);
    CREATE TABLE response_items (
        response_seq BIGINT NOT NULL REFERENCES responses (seq) ON DELETE CASCADE,
        kind TEXT NOT NULL CHECK (kind IN ('input', 'output')),
        position INTEGER NOT NULL,
        item_id TEXT NOT NULL,
        item TEXT NOT NULL,
        PRIMARY KEY (response_seq, kind, position)
    );
    CREATE INDEX response_items_by_id ON response_items (response_seq, kind, item_id)
"""
# The bytes each response takes (its metadata, extra and items as stored, UTF-8), so a tenant's
# usage is one indexed sum; rows written before it are measured once, in characters.
_V2 = """
    ALTER TABLE responses ADD COLUMN size BIGINT NOT NULL DEFAULT 0;
    UPDATE responses SET size = LENGTH(metadata) + LENGTH(extra) + COALESCE(
        (SELECT SUM(LENGTH(item)) FROM response_items WHERE response_seq = responses.seq), 0);
    CREATE INDEX responses_by_owner_age ON responses (owner, created_at, size)
"""
# Batch jobs (the Files and Batches API, docs/batches.md): uploaded files, batches, and each
# line of a batch with its state and result, written as the line completes so a restart
# resumes where it stopped.  A batch's id is unique across owners (random), so its lines key on
# it alone; ``lease_until`` lets a replica take over the lines of one that died mid-line.
_V3 = """
    CREATE TABLE batch_files (
        owner TEXT NOT NULL,
        id TEXT NOT NULL,
        purpose TEXT NOT NULL,
        filename TEXT NOT NULL,
        bytes BIGINT NOT NULL,
        created_at BIGINT NOT NULL,
        content TEXT NOT NULL,
        PRIMARY KEY (owner, id)
    );
    CREATE TABLE batches (
        owner TEXT NOT NULL,
        id TEXT NOT NULL,
        status TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (owner, id),
        UNIQUE (id)
    );
    CREATE INDEX batches_by_status ON batches (status);
    CREATE TABLE batch_lines (
        batch_id TEXT NOT NULL,
        line INTEGER NOT NULL,
        custom_id TEXT NOT NULL,
        request TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('pending', 'running', 'done', 'skipped')),
        lease_until DOUBLE PRECISION NOT NULL DEFAULT 0,
        runs INTEGER NOT NULL DEFAULT 0,
        ok INTEGER,
        result TEXT,
        PRIMARY KEY (batch_id, line)
    );
    CREATE INDEX batch_lines_by_state ON batch_lines (batch_id, state)
"""
_SEQ = {"sqlite": "INTEGER PRIMARY KEY", "postgresql": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"}

# (version, description, script per dialect)
MIGRATIONS: tuple[tuple[int, str, dict[Dialect, str]], ...] = (
    (1, "responses and their items",
     {"sqlite": _V1.format(seq=_SEQ["sqlite"]), "postgresql": _V1.format(seq=_SEQ["postgresql"])}),
    (2, "the size of each response, for tenant quotas", {"sqlite": _V2, "postgresql": _V2}),
    (3, "batch jobs: files, batches and their lines", {"sqlite": _V3, "postgresql": _V3}),
)
LATEST = MIGRATIONS[-1][0]

LEDGER = """CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)"""


class NewerSchemaError(Exception):
    """The database was written by a newer version of the store (schema ``version``)."""

    def __init__(self, version: int) -> None:
        super().__init__(f"its schema is version {version}, and this afm-struct knows versions "
                         f"up to {LATEST}: it was written by a newer afm-struct")
        self.version = version


def apply(cursor: Any, dialect: Dialect, placeholder: str) -> list[int]:
    """Apply the missing migrations through ``cursor`` (a DB-API cursor inside a transaction
    the caller holds exclusively) and return the versions applied.  Raises
    :class:`NewerSchemaError`, and the driver's errors."""
    cursor.execute(LEDGER)
    cursor.execute("SELECT version FROM schema_migrations")
    applied = {row[0] for row in cursor.fetchall()}
    newer = [v for v in applied if v > LATEST]
    if newer:
        raise NewerSchemaError(max(newer))
    done = []
    for version, description, scripts in MIGRATIONS:
        if version in applied:
            continue
        for statement in filter(str.strip, scripts[dialect].split(";")):
            cursor.execute(statement)
        cursor.execute(f"INSERT INTO schema_migrations VALUES ({placeholder}, {placeholder}, {placeholder})",
                       (version, description, time.time()))
        done.append(version)
    return done
