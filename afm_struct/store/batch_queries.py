"""The batch-job queries both SQL stores share (files, batches, lines; see migration 3).

A mixin of :class:`~.sql.SqlStore`: it uses the store's ``_transaction`` and ``_run`` (its
placeholders), so SQLite and PostgreSQL run the same statements.  Lines are claimed under a
lease: a runner takes pending lines, or running ones whose lease ran out (their runner died),
and records a result only while its claim stands (``runs`` unchanged), so a line taken over
is recorded once.  With the store's ttl (``--store-ttl``), files expire as responses do (by
``created_at``; ``expires_at`` says when), and so do batches once ended (a batch still running
is kept: its lines and answers are needed).  On PostgreSQL the claim reads with ``FOR UPDATE SKIP LOCKED``
(:attr:`BatchQueries.claim_lock`): replicas sharing a batch take disjoint lines without
waiting on each other; SQLite's ``BEGIN IMMEDIATE`` already serializes writers.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from .batch_records import (
    ACTIVE_STATUSES,
    ENDED_STATUSES,
    ClaimedLine,
    LineCounts,
    StoredFile,
    unknown_batch,
    unknown_file,
)

_FILE_COLUMNS = "id, owner, purpose, filename, bytes, created_at"
# A batch that the ttl removed: ended, and created before the cutoff.
_GONE = f"(status IN ({', '.join('?' * len(ENDED_STATUSES))}) AND created_at < ?)"


class BatchQueries:
    """Files, batches and batch lines, each read under its owner."""

    #: Appended to the claim's read: "" where the transaction already excludes other writers.
    claim_lock = ""
    lock_row = ""
    placeholder = "?"
    ttl_s: float | None = None

    def _transaction(self, *, write: bool) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def _cutoff(self) -> int:
        raise NotImplementedError

    def _run(self, cursor: Any, sql: str, params: tuple[Any, ...] = ()) -> Any:
        raise NotImplementedError

    # -- files --------------------------------------------------------------------------

    def put_file(self, file: StoredFile) -> StoredFile:
        """Store ``file`` (its ``content`` must be set)."""
        assert file.content is not None
        with self._transaction(write=True) as cur:
            self._purge_batch_jobs(cur, self._cutoff())
            self._run(cur, "INSERT INTO batch_files (id, owner, purpose, filename, bytes, created_at, "
                           "content) VALUES (?, ?, ?, ?, ?, ?, ?)",
                      (file.id, file.owner, file.purpose, file.filename, file.bytes, file.created_at,
                       file.content))
        return self._expiring(file)

    def get_file(self, owner: str, file_id: str, *, content: bool = False) -> StoredFile:
        """The owner's file ``file_id`` (with its text when ``content``); 404 otherwise."""
        columns = _FILE_COLUMNS + (", content" if content else "")
        with self._transaction(write=False) as cur:
            row = self._run(cur, f"SELECT {columns} FROM batch_files WHERE owner = ? AND id = ? "
                                 "AND created_at >= ?", (owner, file_id, self._cutoff())).fetchone()
        if row is None:
            raise unknown_file(file_id)
        return self._expiring(StoredFile(*row[:6], content=row[6] if content else None))

    def list_files(self, owner: str, *, purpose: str | None = None, after: str | None = None,
                   limit: int = 100, order: str = "desc") -> tuple[list[StoredFile], bool]:
        """The owner's files, newest first (``order`` "asc": oldest), after the file ``after``;
        and whether more follow."""
        where, params = "owner = ? AND created_at >= ?", [owner, self._cutoff()]
        if purpose is not None:
            where += " AND purpose = ?"
            params.append(purpose)
        with self._transaction(write=False) as cur:
            where, params = self._after(cur, "batch_files", owner, after, order, where, params)
            direction = "ASC" if order == "asc" else "DESC"
            rows = self._run(cur, f"SELECT {_FILE_COLUMNS} FROM batch_files WHERE {where} "
                                  f"ORDER BY created_at {direction}, id {direction} LIMIT ?",
                             (*params, limit + 1)).fetchall()
        return [self._expiring(StoredFile(*row)) for row in rows[:limit]], len(rows) > limit

    def delete_file(self, owner: str, file_id: str) -> None:
        """Delete the owner's file; 404 when the owner has none of that id."""
        with self._transaction(write=True) as cur:
            gone = self._run(cur, "DELETE FROM batch_files WHERE owner = ? AND id = ? AND created_at >= ?",
                             (owner, file_id, self._cutoff())).rowcount
        if not gone:
            raise unknown_file(file_id)

    # -- batches ------------------------------------------------------------------------

    def create_batch(self, owner: str, batch: dict[str, Any], lines: Sequence[tuple[int, str, str]]) -> None:
        """Store the batch object ``batch`` and its lines ((line index in the file, custom_id,
        request text)), in one transaction."""
        with self._transaction(write=True) as cur:
            self._purge_batch_jobs(cur, self._cutoff())
            self._run(cur, "INSERT INTO batches (owner, id, status, created_at, body) VALUES (?, ?, ?, ?, ?)",
                      (owner, batch["id"], batch["status"], batch["created_at"], json.dumps(batch)))
            rows = [(batch["id"], n, custom_id, request, "pending") for n, custom_id, request in lines]
            sql = "INSERT INTO batch_lines (batch_id, line, custom_id, request, state) VALUES (?, ?, ?, ?, ?)"
            cur.executemany(sql.replace("?", self.placeholder), rows)

    def get_batch(self, owner: str, batch_id: str) -> dict[str, Any]:
        """The owner's batch object as stored (status included, counts not); 404 otherwise."""
        with self._transaction(write=False) as cur:
            sql = f"SELECT status, body FROM batches WHERE owner = ? AND id = ? AND NOT {_GONE}"
            row = self._run(cur, sql, (owner, batch_id, *ENDED_STATUSES, self._cutoff())).fetchone()
        if row is None:
            raise unknown_batch(batch_id)
        return {**json.loads(row[1]), "status": row[0]}

    def list_batches(self, owner: str, *, after: str | None = None,
                     limit: int = 20) -> tuple[list[dict[str, Any]], bool]:
        """The owner's batches, newest first, after the batch ``after``; and whether more follow."""
        with self._transaction(write=False) as cur:
            where, params = self._after(cur, "batches", owner, after, "desc", f"owner = ? AND NOT {_GONE}",
                                        [owner, *ENDED_STATUSES, self._cutoff()])
            rows = self._run(cur, f"SELECT status, body FROM batches WHERE {where} "
                                  "ORDER BY created_at DESC, id DESC LIMIT ?",
                             (*params, limit + 1)).fetchall()
        return [{**json.loads(body), "status": status} for status, body in rows[:limit]], len(rows) > limit

    def active_batches(self) -> list[tuple[str, dict[str, Any]]]:
        """(owner, batch object) of every batch a runner still has work on, oldest first."""
        marks = ", ".join("?" * len(ACTIVE_STATUSES))
        with self._transaction(write=False) as cur:
            rows = self._run(cur, f"SELECT owner, status, body FROM batches WHERE status IN ({marks}) "
                                  "ORDER BY created_at, id", ACTIVE_STATUSES).fetchall()
        return [(owner, {**json.loads(body), "status": status}) for owner, status, body in rows]

    def update_batch(self, batch_id: str, status: str, fields: dict[str, Any], *,
                     expect: Sequence[str] | None = None, owner: str | None = None) -> dict[str, Any] | None:
        """Set the batch's ``status`` and merge ``fields`` into its object, when its status is one
        of ``expect`` (None: any); returns the new object, or None when the status did not match
        (another runner or a cancel moved it first).  With ``owner``, another owner's batch is a 404."""
        with self._transaction(write=True) as cur:
            row = self._run(cur, f"SELECT owner, status, body FROM batches WHERE id = ?{self.lock_row}",
                            (batch_id,)).fetchone()
            if row is None or (owner is not None and row[0] != owner):
                raise unknown_batch(batch_id)
            if expect is not None and row[1] not in expect:
                return None
            body = {**json.loads(row[2]), **fields, "status": status}
            self._run(cur, "UPDATE batches SET status = ?, body = ? WHERE id = ?",
                      (status, json.dumps(body), batch_id))
        return body

    # -- lines --------------------------------------------------------------------------

    def claim_lines(self, batch_id: str, count: int, *, now: float, lease_s: float) -> list[ClaimedLine]:
        """Take up to ``count`` lines of the batch to run: pending ones, or running ones whose
        lease ended before ``now``; each is running under a lease until ``now + lease_s``."""
        if count <= 0:
            return []
        with self._transaction(write=True) as cur:
            rows = self._run(cur, "SELECT line, custom_id, request, runs FROM batch_lines WHERE batch_id = ? "
                                  "AND (state = 'pending' OR (state = 'running' AND lease_until < ?)) "
                                  f"ORDER BY line LIMIT ?{self.claim_lock}",
                             (batch_id, now, count)).fetchall()
            for line, *_ in rows:
                self._run(cur, "UPDATE batch_lines SET state = 'running', runs = runs + 1, lease_until = ? "
                               "WHERE batch_id = ? AND line = ?", (now + lease_s, batch_id, line))
        return [ClaimedLine(batch_id, line, custom_id, request, runs + 1)
                for line, custom_id, request, runs in rows]

    def renew_lines(self, claims: Sequence[ClaimedLine], until: float) -> None:
        """Extend the lease of lines still held by these claims."""
        if not claims:
            return
        with self._transaction(write=True) as cur:
            for c in claims:
                self._run(cur, "UPDATE batch_lines SET lease_until = ? WHERE batch_id = ? AND line = ? "
                               "AND state = 'running' AND runs = ?", (until, c.batch_id, c.line, c.runs))

    def finish_line(self, claim: ClaimedLine, ok: bool, result: str) -> bool:
        """Record the line's result (its output line's JSON text), if the claim still holds it;
        False when another runner took it over (its result is the one kept)."""
        with self._transaction(write=True) as cur:
            done = self._run(cur, "UPDATE batch_lines SET state = 'done', ok = ?, result = ? WHERE "
                                  "batch_id = ? AND line = ? AND state = 'running' AND runs = ?",
                             (int(ok), result, claim.batch_id, claim.line, claim.runs)).rowcount
        return bool(done)

    def release_line(self, claim: ClaimedLine) -> None:
        """Give a claimed line back unrun (the engine was full): pending again, the run uncounted."""
        with self._transaction(write=True) as cur:
            self._run(cur, "UPDATE batch_lines SET state = 'pending', runs = runs - 1, lease_until = 0 "
                           "WHERE batch_id = ? AND line = ? AND state = 'running' AND runs = ?",
                      (claim.batch_id, claim.line, claim.runs))

    def skip_pending(self, batch_id: str, *, now: float) -> int:
        """Mark the batch's lines not yet claimed as skipped (a cancel), and those whose runner's
        lease ended before ``now`` (it died: nothing will record them); returns how many."""
        with self._transaction(write=True) as cur:
            return int(self._run(cur, "UPDATE batch_lines SET state = 'skipped' WHERE batch_id = ? "
                                      "AND (state = 'pending' OR (state = 'running' AND lease_until < ?))",
                                 (batch_id, now)).rowcount)

    def line_counts(self, batch_id: str) -> LineCounts:
        """How many of the batch's lines are in each state."""
        with self._transaction(write=False) as cur:
            rows = self._run(cur, "SELECT state, ok, COUNT(*) FROM batch_lines WHERE batch_id = ? "
                                  "GROUP BY state, ok", (batch_id,)).fetchall()
        by: dict[str, int] = {}
        for state, ok, n in rows:
            key = ("succeeded" if ok else "failed") if state == "done" else state
            by[key] = by.get(key, 0) + int(n)
        return LineCounts(total=sum(by.values()), **by)

    def line_results(self, batch_id: str) -> list[tuple[int, bool, str]]:
        """(line, ok, output line text) of every done line, in line order."""
        with self._transaction(write=False) as cur:
            rows = self._run(cur, "SELECT line, ok, result FROM batch_lines WHERE batch_id = ? "
                                  "AND state = 'done' ORDER BY line", (batch_id,)).fetchall()
        return [(int(line), bool(ok), result) for line, ok, result in rows]

    def skipped_lines(self, batch_id: str) -> list[tuple[int, str]]:
        """(line, custom_id) of every line skipped (never answered), in line order."""
        with self._transaction(write=False) as cur:
            rows = self._run(cur, "SELECT line, custom_id FROM batch_lines WHERE batch_id = ? "
                                  "AND state = 'skipped' ORDER BY line", (batch_id,)).fetchall()
        return [(int(line), custom_id) for line, custom_id in rows]

    def line_runs(self, batch_id: str) -> list[tuple[int, str, int]]:
        """(line, state, runs) of every line: how often each was started (tests, operators)."""
        with self._transaction(write=False) as cur:
            rows = self._run(cur, "SELECT line, state, runs FROM batch_lines WHERE batch_id = ? "
                                  "ORDER BY line", (batch_id,)).fetchall()
        return [(int(line), state, int(runs)) for line, state, runs in rows]

    # -- helpers ------------------------------------------------------------------------

    def _expiring(self, file: StoredFile) -> StoredFile:
        """``file`` with the time the ttl deletes it (none without a ttl)."""
        if self.ttl_s is None:
            return file
        # Gone once its created_at (whole seconds) is before the cutoff: within a second after.
        return dataclasses.replace(file, expires_at=file.created_at + math.ceil(self.ttl_s) + 1)

    def _purge_batch_jobs(self, cur: Any, cutoff: int) -> None:
        """Delete the files, and the ended batches with their lines, created before ``cutoff``
        (inside a write transaction; nothing without a ttl)."""
        if self.ttl_s is None:
            return
        self._run(cur, "DELETE FROM batch_files WHERE created_at < ?", (cutoff,))
        self._run(cur, f"DELETE FROM batch_lines WHERE batch_id IN (SELECT id FROM batches WHERE {_GONE})",
                  (*ENDED_STATUSES, cutoff))
        self._run(cur, f"DELETE FROM batches WHERE {_GONE}", (*ENDED_STATUSES, cutoff))

    def _after(self, cur: Any, table: str, owner: str, after: str | None, order: str, where: str,
               params: list[Any]) -> tuple[str, list[Any]]:
        """``where`` narrowed to the rows after the row ``after`` (by created_at, then id)."""
        if after is None:
            return where, params
        row = self._run(cur, f"SELECT created_at FROM {table} WHERE owner = ? AND id = ?",
                        (owner, after)).fetchone()
        if row is None:
            from ..errors import InvalidRequestError

            noun = "file" if table == "batch_files" else "batch"
            raise InvalidRequestError(f"after: there is no {noun} {after!r}", param="after")
        cmp = ">" if order == "asc" else "<"
        return (f"{where} AND (created_at {cmp} ? OR (created_at = ? AND id {cmp} ?))",
                [*params, row[0], row[0], after])
