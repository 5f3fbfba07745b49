"""The SQLite store's own promises: WAL mode, a clear error for every unusable path at open,
the migration ledger, and deleted content gone from the file."""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

import pytest

from afm_struct.store import StoredResponse, StoreError, default_store_path, migrations, open_store


def _open_error(path: Path | str) -> str:
    with pytest.raises(StoreError) as err:
        open_store(str(path))
    assert str(path) in err.value.message, err.value.message
    return err.value.message


def test_the_file_is_in_wal_mode_with_the_latest_schema(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "dir" / "r.sqlite3"  # its directory is made
    open_store(str(path)).close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == migrations.LATEST
        versions = [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]
    assert versions == [v for v, _, _ in migrations.MIGRATIONS]
    open_store(str(path)).close()  # reopened: nothing applied twice
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM schema_migrations").fetchone()[0] == len(versions)


@pytest.mark.parametrize("content", [b"hello, not a database\n" * 100,
                                     b"SQLite format 3\x00" + b"\xff" * 4080])
def test_a_corrupt_file_is_a_clear_error_naming_it(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "r.sqlite3"
    path.write_bytes(content)
    assert "not a usable SQLite database" in _open_error(path)
    assert path.read_bytes() == content  # left as it was, for the operator to look at


def test_a_directory_is_a_clear_error(tmp_path: Path) -> None:
    assert "is a directory" in _open_error(tmp_path)


def test_a_path_under_a_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    assert "cannot create the directory" in _open_error(tmp_path / "f" / "r.sqlite3")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc, which nobody can write")
def test_an_unwritable_place_is_a_clear_error_even_for_root() -> None:
    assert "cannot be written" in _open_error("/proc/afm-struct-responses.sqlite3")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes read-only files")
def test_a_read_only_file_or_directory_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite3"
    open_store(str(path)).close()
    path.chmod(0o444)
    assert "cannot be written" in _open_error(path)
    path.chmod(0o644)
    tmp_path.chmod(0o555)
    try:
        assert "cannot be" in _open_error(tmp_path / "new.sqlite3")
    finally:
        tmp_path.chmod(0o755)


def test_a_file_from_a_newer_afm_struct_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite3"
    open_store(str(path)).close()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO schema_migrations VALUES (?, 'from the future', 0)",
                     (migrations.LATEST + 1,))
    assert "newer afm-struct" in _open_error(path)


def test_deleted_content_is_gone_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite3"
    secret = "tenant-a-secret-7f3e9c"
    store = open_store(str(path))
    for n in range(3):
        store.put(StoredResponse(id=f"r{n}", owner="name:a", status="completed", created_at=0,
                                 model="m", input_items=[{"content": f"{secret}-{n}" * 50}]))
    store.close()  # checkpointed: the rows are in the file itself now
    store = open_store(str(path))
    store.delete("name:a", "r1")
    store.close()  # the last connection out checkpoints the WAL into the file
    data = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert f"{secret}-0".encode() in data  # the kept ones are there (the search can find it)
    assert f"{secret}-1".encode() not in data


def test_the_default_path_follows_xdg_data_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_store_path() == tmp_path / "afm-struct" / "responses.sqlite3"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_store_path() == tmp_path / "home" / ".local" / "share" / "afm-struct" / "responses.sqlite3"
