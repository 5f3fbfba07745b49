"""The queries both SQL stores share; a subclass brings the connection and its transactions.

Queries are written with ``?`` placeholders (SQLite's); a store whose driver wants another
(psycopg's ``%s``) sets :attr:`SqlStore.placeholder`.  Every method runs in one transaction, so
a reader never sees half a response, and every query names the owner.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from ..errors import InvalidRequestError
from .batch_queries import BatchQueries
from .records import (
    DEFAULT_LIMIT,
    Item,
    ItemPage,
    Order,
    StoredResponse,
    StoreUsage,
    check_page,
    not_found,
    to_json,
)

_COLUMNS = "seq, id, owner, status, created_at, model, metadata, previous_response_id, extra"
# The chain a response continues, newest first.  UNION (not UNION ALL) drops a row already
# reached, so even a cycle a bug wrote would end the walk.
# Only live rows: an expired response is gone for every read, as a deleted one, before the
# purge removes it.
_CHAIN = """WITH RECURSIVE chain (seq, id, previous_response_id) AS (
        SELECT seq, id, previous_response_id FROM responses WHERE owner = ? AND id = ?
            AND created_at >= ?
        UNION
        SELECT r.seq, r.id, r.previous_response_id FROM responses r
        JOIN chain c ON r.owner = ? AND r.id = c.previous_response_id AND r.created_at >= ?)"""
# The cutoff when responses never expire: before any created_at.
_NEVER = -(2**62)


class SqlStore(BatchQueries):
    """:class:`~.protocol.ResponseStore` over a DB-API connection (see the subclasses), and the
    batch jobs' tables (:class:`~.batch_queries.BatchQueries`)."""

    placeholder = "?"
    # Appended to the read of a response about to be replaced, to lock its row ("" where the
    # transaction already excludes other writers, as SQLite's BEGIN IMMEDIATE does).
    lock_row = ""
    description = "a response store"
    #: Seconds a response is kept after its ``created_at`` (None: for ever), and the clock
    #: (Unix seconds) that ages it; set by the subclass's constructor.
    ttl_s: float | None = None
    clock: Callable[[], float] = staticmethod(time.time)

    def _expiry(self, ttl_s: float | None, clock: Callable[[], float] | None) -> None:
        if ttl_s is not None and not ttl_s > 0:
            raise ValueError(f"a store's ttl must be a positive number of seconds, not {ttl_s!r}")
        self.ttl_s = ttl_s
        if clock is not None:
            self.clock = clock

    def _cutoff(self) -> int:
        """The oldest ``created_at`` still live: older responses have expired."""
        if self.ttl_s is None:
            return _NEVER
        # A response created in the second the cutoff falls in is still live (created_at is
        # whole seconds): it expires within a second after its ttl, never before.
        return int(self.clock() - self.ttl_s)

    def _transaction(self, *, write: bool) -> AbstractContextManager[Any]:
        """A cursor inside one transaction (committed on exit, rolled back on an exception);
        driver errors come out as :class:`~.records.StoreError`."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the connection (idempotent)."""
        raise NotImplementedError

    def _run(self, cursor: Any, sql: str, params: tuple[Any, ...] = ()) -> Any:
        if self.placeholder != "?":
            sql = sql.replace("?", self.placeholder)
        cursor.execute(sql, params)
        return cursor

    # -- the interface -------------------------------------------------------------------

    def put(self, response: StoredResponse) -> StoredResponse:
        """See :meth:`.protocol.ResponseStore.put`."""
        response = response.with_item_ids()
        items = [(kind, position, item["id"], to_json(item))
                 for kind, items in (("input", response.input_items), ("output", response.output_items))
                 for position, item in enumerate(items)]
        metadata, extra = to_json(response.metadata), to_json(response.extra)
        size = sum(len(text.encode()) for text in (metadata, extra, *(row[3] for row in items)))
        with self._transaction(write=True) as cur:
            # Every write purges what has expired (an indexed range, empty most times), so the
            # store holds at most one ttl of responses however few reads come.
            cutoff = self._purge(cur)
            # Locked (PostgreSQL): a concurrent put of the same id waits, then sees this one's.
            # An expired row of the same id is gone by now: the put makes a new response.
            old = self._run(cur, "SELECT seq, previous_response_id FROM responses WHERE owner = ? "
                                 f"AND id = ?{self.lock_row}", (response.owner, response.id)).fetchone()
            if old is not None and old[1] != response.previous_response_id:
                raise InvalidRequestError(
                    f"stored response {response.id!r} continues {old[1]!r}: a replacement cannot "
                    "change its previous_response_id", param="previous_response_id")
            if old is None and response.previous_response_id is not None:
                chain = self._chain(cur, response.owner, response.previous_response_id, cutoff)
                if not chain:
                    raise not_found(response.previous_response_id, "previous_response_id")
                if any(response.id in (row[1], row[2]) for row in chain):
                    raise InvalidRequestError(
                        f"response {response.id!r} cannot continue {response.previous_response_id!r}: "
                        "that chain already leads back to it", param="previous_response_id")
            fields = (response.status, response.created_at, response.model, metadata, extra, size)
            if old is not None:  # replaced in place: the row (and its lock) stays
                seq = old[0]
                self._run(cur, "UPDATE responses SET status = ?, created_at = ?, model = ?, "
                               "metadata = ?, extra = ?, size = ? WHERE seq = ?", (*fields, seq))
                self._run(cur, "DELETE FROM response_items WHERE response_seq = ?", (seq,))
            else:
                seq = self._run(cur, "INSERT INTO responses (status, created_at, model, metadata, extra, "
                                     "size, id, owner, previous_response_id) VALUES (?, ?, ?, ?, ?, ?, ?, "
                                     "?, ?) RETURNING seq", (*fields, response.id, response.owner,
                                                             response.previous_response_id)).fetchone()[0]
            rows = [(seq, *row) for row in items]
            if rows:
                sql = "INSERT INTO response_items VALUES (?, ?, ?, ?, ?)"
                cur.executemany(sql.replace("?", self.placeholder), rows)
        return response

    def get(self, owner: str, response_id: str) -> StoredResponse:
        """See :meth:`.protocol.ResponseStore.get`."""
        with self._transaction(write=False) as cur:
            row = self._run(cur, f"SELECT {_COLUMNS} FROM responses WHERE owner = ? AND id = ? "
                                 "AND created_at >= ?", (owner, response_id, self._cutoff())).fetchone()
            if row is None:
                raise not_found(response_id)
            items = self._run(cur, "SELECT kind, item FROM response_items WHERE response_seq = ? "
                                   "ORDER BY kind, position", (row[0],)).fetchall()
        return StoredResponse(
            id=row[1], owner=row[2], status=row[3], created_at=int(row[4]), model=row[5],
            metadata=json.loads(row[6]), previous_response_id=row[7], extra=json.loads(row[8]),
            input_items=[json.loads(item) for kind, item in items if kind == "input"],
            output_items=[json.loads(item) for kind, item in items if kind == "output"])

    def delete(self, owner: str, response_id: str) -> None:
        """See :meth:`.protocol.ResponseStore.delete`."""
        with self._transaction(write=True) as cur:
            row = self._live_seq(cur, owner, response_id)
            if row is None:
                raise not_found(response_id)
            self._delete_seq(cur, row[0])

    def input_items(self, owner: str, response_id: str, *, after: str | None = None,
                    limit: int = DEFAULT_LIMIT, order: Order = "desc") -> ItemPage:
        """See :meth:`.protocol.ResponseStore.input_items`."""
        check_page(limit, order)
        with self._transaction(write=False) as cur:
            row = self._live_seq(cur, owner, response_id)
            if row is None:
                raise not_found(response_id)
            where, params = "response_seq = ? AND kind = 'input'", [row[0]]
            if after is not None:
                found = self._run(cur, f"SELECT MIN(position) FROM response_items WHERE {where} "
                                       "AND item_id = ?", (row[0], after)).fetchone()
                if found is None or found[0] is None:
                    raise InvalidRequestError(f"after: response {response_id!r} has no input item "
                                              f"{after!r}", param="after")
                where += " AND position > ?" if order == "asc" else " AND position < ?"
                params.append(found[0])
            direction = "ASC" if order == "asc" else "DESC"
            items = self._run(cur, f"SELECT item FROM response_items WHERE {where} "
                                   f"ORDER BY position {direction} LIMIT ?",
                              (*params, limit + 1)).fetchall()
        data = [json.loads(item) for (item,) in items]
        return ItemPage(data=data[:limit], has_more=len(data) > limit)

    def conversation(self, owner: str, previous_response_id: str) -> list[Item]:
        """See :meth:`.protocol.ResponseStore.conversation`."""
        with self._transaction(write=False) as cur:
            links = {row[1]: row for row in self._chain(cur, owner, previous_response_id, self._cutoff())}
            order: list[Any] = []
            link: str | None = previous_response_id
            while link is not None:
                if link not in links:  # unknown, another owner's, or a gap left by a delete
                    raise not_found(previous_response_id, "previous_response_id")
                order.append(links.pop(link))
                link = order[-1][2]
            items = list(self._items(cur, [row[0] for row in order]))
        by_seq: dict[int, list[tuple[str, int, str]]] = {}
        for seq, kind, position, item in items:
            by_seq.setdefault(seq, []).append((kind, position, item))
        return [json.loads(item) for row in reversed(order)
                for _, _, item in sorted(by_seq.get(row[0], []))]

    def usage(self, owner: str) -> StoreUsage:
        """See :meth:`.protocol.ResponseStore.usage`."""
        with self._transaction(write=False) as cur:
            count, size = self._run(cur, "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM responses "
                                         "WHERE owner = ? AND created_at >= ?",
                                    (owner, self._cutoff())).fetchone()
        return StoreUsage(responses=int(count), bytes=int(size))

    def purge(self) -> int:
        """See :meth:`.protocol.ResponseStore.purge`."""
        if self.ttl_s is None:
            return 0
        with self._transaction(write=True) as cur:
            cutoff = self._cutoff()
            count = self._run(cur, "SELECT COUNT(*) FROM responses WHERE created_at < ?",
                              (cutoff,)).fetchone()[0]
            self._purge(cur, cutoff)
        return int(count)

    # -- helpers --------------------------------------------------------------------------

    def _purge(self, cur: Any, cutoff: int | None = None) -> int:
        """Delete the expired responses and their items (inside a write transaction); returns
        the cutoff used."""
        cutoff = self._cutoff() if cutoff is None else cutoff
        if self.ttl_s is not None:
            self._run(cur, "DELETE FROM response_items WHERE response_seq IN "
                           "(SELECT seq FROM responses WHERE created_at < ?)", (cutoff,))
            self._run(cur, "DELETE FROM responses WHERE created_at < ?", (cutoff,))
            self._purge_batch_jobs(cur, cutoff)  # files and ended batches age alike
        return cutoff

    def _live_seq(self, cur: Any, owner: str, response_id: str) -> Any:
        return self._run(cur, "SELECT seq FROM responses WHERE owner = ? AND id = ? AND created_at >= ?",
                         (owner, response_id, self._cutoff())).fetchone()

    def _chain(self, cur: Any, owner: str, response_id: str,
               cutoff: int) -> list[tuple[int, str, str | None]]:
        """(seq, id, previous_response_id) of the live response and the live ones it continues."""
        return self._run(cur, f"{_CHAIN} SELECT seq, id, previous_response_id FROM chain",
                         (owner, response_id, cutoff, owner, cutoff)).fetchall()

    def _items(self, cur: Any, seqs: list[int]) -> Iterator[tuple[int, str, int, str]]:
        # In slices: SQLite caps the variables of one statement.
        for start in range(0, len(seqs), 500):
            part = seqs[start:start + 500]
            marks = ", ".join("?" * len(part))
            yield from self._run(cur, "SELECT response_seq, kind, position, item FROM response_items "
                                      f"WHERE response_seq IN ({marks})", tuple(part)).fetchall()

    def _delete_seq(self, cur: Any, seq: int) -> None:
        # Items first and explicitly: SQLite enforces the cascade only with foreign_keys on.
        self._run(cur, "DELETE FROM response_items WHERE response_seq = ?", (seq,))
        self._run(cur, "DELETE FROM responses WHERE seq = ?", (seq,))
