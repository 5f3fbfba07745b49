"""The batch tables of both stores: lines claimed under a lease, taken over when it runs out,
recorded once (a stale runner's answer is dropped), skipped by a cancel, owned per tenant."""

from __future__ import annotations

from typing import Any

import pytest

from afm_struct.errors import NotFoundError
from afm_struct.store.batch_records import StoredFile


def _batch(store: Any, lines: int = 3) -> str:
    store.create_batch("alice", {"id": "batch_1", "status": "in_progress", "created_at": 1},
                       [(n, f"c{n}", "{}") for n in range(lines)])
    return "batch_1"


def test_a_line_taken_over_after_its_lease_is_recorded_once(store: Any) -> None:
    batch = _batch(store)
    first = store.claim_lines(batch, 2, now=100.0, lease_s=10)
    assert [c.line for c in first] == [0, 1]
    assert [c.line for c in store.claim_lines(batch, 5, now=105.0, lease_s=10)] == [2]
    assert store.claim_lines(batch, 5, now=105.0, lease_s=10) == []  # all held
    store.renew_lines(first[:1], 200.0)
    taken = store.claim_lines(batch, 5, now=111.0, lease_s=10)  # line 1's lease ran out; 0 renewed
    assert [(c.line, c.runs) for c in taken] == [(1, 2)]
    assert not store.finish_line(first[1], True, "stale")  # the first runner lost it
    assert store.finish_line(taken[0], True, "kept") and store.finish_line(first[0], False, "err")
    assert store.line_results(batch) == [(0, False, "err"), (1, True, "kept")]
    counts = store.line_counts(batch)
    assert (counts.total, counts.succeeded, counts.failed, counts.running) == (3, 1, 1, 1)
    assert [runs for _, _, runs in store.line_runs(batch)] == [1, 2, 1]


def test_a_cancel_skips_pending_and_orphaned_lines(store: Any) -> None:
    batch = _batch(store, lines=4)
    held = store.claim_lines(batch, 1, now=100.0, lease_s=10)
    orphan = store.claim_lines(batch, 1, now=50.0, lease_s=10)
    assert store.skip_pending(batch, now=100.0) == 3  # two pending, and the orphan (lease ended at 60)
    assert store.line_counts(batch).running == 1 and store.finish_line(held[0], True, "x")
    assert not store.finish_line(orphan[0], True, "late")
    assert store.line_counts(batch).settled


def test_files_and_batches_are_their_owners(store: Any) -> None:
    store.put_file(StoredFile("file-1", "alice", "batch", "in.jsonl", 3, 1, "abc"))
    _batch(store)
    for call in (lambda: store.get_file("bob", "file-1"), lambda: store.delete_file("bob", "file-1"),
                 lambda: store.get_batch("bob", "batch_1"),
                 lambda: store.update_batch("batch_1", "cancelling", {}, owner="bob")):
        with pytest.raises(NotFoundError):
            call()
    assert store.list_files("bob") == ([], False) and store.list_batches("bob") == ([], False)
    assert store.get_file("alice", "file-1", content=True).content == "abc"
    assert store.update_batch("batch_1", "completed", {}, expect=("validating",)) is None
