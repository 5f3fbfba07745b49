"""Several processes writing one store at once lose nothing (both stores): three writer
processes (tests/store/writers.py) store chains of responses together, then the rows are
counted and every chain read back."""

from __future__ import annotations

import os
import signal
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


def _env() -> dict[str, str]:
    paths = [str(ROOT), os.environ.get("PYTHONPATH")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths))}


def run_writers(spec: str, count: int, go: Path) -> None:
    """Run the writer processes (they start storing once ``go`` exists); each must exit 0."""
    env = _env()
    procs = [subprocess.Popen([sys.executable, "-m", "tests.store.writers", spec, str(w), str(count),
                               str(go)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
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


def test_two_connections_replacing_one_response_at_once_leave_one_whole(store_spec: str) -> None:
    """Two store instances (two connections) put the same (owner, id) over and over at once:
    no put fails, and the response left is one of theirs, whole (PostgreSQL: the loser of a
    race on the unique key retries; SQLite: writers take turns)."""
    import threading

    from afm_struct.store import StoredResponse

    stores = [open_store(store_spec), open_store(store_spec)]
    failures: list[BaseException] = []
    go = threading.Barrier(2)

    def writer(n: int) -> None:
        try:
            go.wait()
            for round_ in range(25):
                stores[n].put(StoredResponse(
                    id="resp_same", owner="name:a", status="completed", created_at=round_, model="m",
                    input_items=[{"content": f"writer {n} round {round_} item {i}"} for i in range(3)]))
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    try:
        assert not failures, failures
        assert count_rows(store_spec) == (1, 3)
        left = stores[0].get("name:a", "resp_same")
        writer_round = left.input_items[0]["content"].rsplit(" item", 1)[0]
        assert [i["content"] for i in left.input_items] == [f"{writer_round} item {i}" for i in range(3)]
    finally:
        for store in stores:
            store.close()


def test_a_killed_writer_loses_no_response_it_stored(store_spec: str, tmp_path: Path) -> None:
    """SIGKILL a writer in the middle of its puts: every id it saw stored is there, whole, after
    a reopen, and no response is there half (each has its two items)."""
    go = tmp_path / "go"
    go.touch()
    proc = subprocess.Popen([sys.executable, "-m", "tests.store.writers", store_spec, "0", "100000",
                             str(go)], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    stored = [proc.stdout.readline().strip() for _ in range(40)]
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert all(stored), proc.stderr.read() if proc.stderr else ""
    responses, items = count_rows(store_spec)
    assert responses >= len(stored) and items == 2 * responses  # nothing half-stored
    store = open_store(store_spec)
    try:
        chain = store.conversation(owner_of(0), stored[-1])
        assert [i["content"] for i in chain] == [f"{rid} {kind}" for rid in stored for kind in ("in", "out")]
    finally:
        store.close()
