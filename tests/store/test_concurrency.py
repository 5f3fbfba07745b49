"""Several processes writing one store at once lose nothing (both stores): three writer
processes (tests/store/writers.py) store chains of responses together, then the rows are
counted and every chain read back."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from afm_struct.store import open_store
from tests.store.writers import owner_of

WRITERS, PER_WRITER = 3, 40
ROOT = Path(__file__).resolve().parents[2]


def count_rows(spec: str) -> tuple[int, int]:
    """(responses, items) in the store, counted by SQL directly, not through the store."""
    queries = ("SELECT COUNT(*) FROM responses", "SELECT COUNT(*) FROM response_items")
    if spec.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(spec) as conn:
            return tuple(conn.execute(q).fetchone()[0] for q in queries)  # type: ignore[return-value]
    with sqlite3.connect(spec) as conn:
        return tuple(conn.execute(q).fetchone()[0] for q in queries)  # type: ignore[return-value]


def run_writers(spec: str, count: int, go: Path) -> None:
    """Run the writer processes (they start storing once ``go`` exists); each must exit 0."""
    paths = [str(ROOT), os.environ.get("PYTHONPATH")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths))}
    procs = [subprocess.Popen([sys.executable, "-m", "tests.store.writers", spec, str(w), str(count),
                               str(go)], cwd=ROOT, env=env, stderr=subprocess.PIPE)
             for w in range(WRITERS)]
    go.touch()
    for proc in procs:
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err.decode()[-2000:]


def test_three_processes_writing_at_once_lose_nothing(store_spec: str, tmp_path: Path) -> None:
    open_store(store_spec).close()  # created and migrated (writers racing to migrate: below)
    run_writers(store_spec, PER_WRITER, tmp_path / "go")
    assert count_rows(store_spec) == (WRITERS * PER_WRITER, WRITERS * PER_WRITER * 2)
    store = open_store(store_spec)
    try:
        for w in range(WRITERS):
            items = store.conversation(owner_of(w), f"w{w}-{PER_WRITER - 1}")
            assert [i["content"] for i in items] == [
                f"w{w}-{n} {kind}" for n in range(PER_WRITER) for kind in ("in", "out")]
    finally:
        store.close()


def test_processes_opening_a_new_store_together_migrate_it_once(store_spec: str, tmp_path: Path) -> None:
    run_writers(store_spec, 1, tmp_path / "go")  # nothing created before: all three migrate
    assert count_rows(store_spec) == (WRITERS, WRITERS * 2)
