"""``afm-struct serve --responses-store PATH|postgresql://… / --no-store``: a store that cannot
be used stops the start-up with one line naming it; a good one is opened, migrated, and
closed at shutdown; the cluster hands the options to its replicas."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from afm_struct.cli import build_parser, main
from afm_struct.cli.cluster import forwarded_args
from afm_struct.cli.cluster_ports import free_port
from afm_struct.cli.serve import STORE_ENV, open_response_store
from afm_struct.errors import AfmError
from tests.postgres_server import PostgresServer

EXE = str(Path(sys.executable).with_name("afm-struct"))


def _serve_fails(*args: str, env: dict[str, str] | None = None) -> str:
    """The one error line of a serve that must not start (exit 1, no traceback)."""
    import os

    proc = subprocess.run([EXE, "serve", "--model", "scripted", "--port", str(free_port()), *args],
                          capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def test_a_corrupt_store_stops_the_start_up_naming_the_path(tmp_path: Path) -> None:
    path = tmp_path / "responses.sqlite3"
    path.write_text("not a database\n" * 300)
    line = _serve_fails("--responses-store", str(path))
    assert str(path) in line and "not a usable SQLite database" in line
    assert "loading" not in line


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc, which nobody can write")
def test_an_unwritable_store_stops_the_start_up_naming_the_path(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(STORE_ENV, "/proc/afm-struct/responses.sqlite3")
    assert main(["serve", "--model", "scripted"]) == 1  # in this process: the model is never loaded
    err = capsys.readouterr().err
    assert "afm-struct: error: cannot create the directory of the response store " \
           "/proc/afm-struct/responses.sqlite3" in err
    assert "loading" not in err


def test_no_store_and_a_store_path_contradict(tmp_path: Path) -> None:
    args = build_parser().parse_args(["serve", "--no-store", "--responses-store", str(tmp_path / "r")])
    with pytest.raises(AfmError, match="contradict"):
        open_response_store(args)
    args = build_parser().parse_args(["serve", "--no-store"])
    assert open_response_store(args, {STORE_ENV: str(tmp_path / "ignored")}) is None


def test_the_options_pick_the_store(tmp_path: Path) -> None:
    args = build_parser().parse_args(["serve"])
    store = open_response_store(args, {STORE_ENV: str(tmp_path / "env.sqlite3")})
    assert store.description == f"SQLite file {tmp_path / 'env.sqlite3'}"
    store.close()
    args = build_parser().parse_args(["serve", "--responses-store", str(tmp_path / "cli.sqlite3")])
    store = open_response_store(args, {STORE_ENV: str(tmp_path / "env.sqlite3")})
    assert store.description == f"SQLite file {tmp_path / 'cli.sqlite3'}"  # the option wins
    store.close()


def test_the_cluster_forwards_the_store_options(tmp_path: Path) -> None:
    for argv, forwarded in ((["--no-store"], ["--no-store"]),
                            # In the replicas' environment instead (a URL may hold a password):
                            # tests/cluster/test_cluster_cli.py::test_the_response_store_reaches_...
                            (["--responses-store", "/x/r.db"], []),
                            ([], [])):
        args = build_parser().parse_args(["cluster", *argv])
        got = forwarded_args(args, args.serve_actions)
        assert [a for a in got if a in ("--no-store", "--responses-store", "/x/r.db")] == forwarded


def _start(args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], int]:
    import os

    port = free_port()
    proc = subprocess.Popen([EXE, "serve", "--model", "scripted", "--port", str(port),
                             "--log-level", "warning", *args], env={**os.environ, **env},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
            return proc, port
        except httpx.HTTPError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"server did not start: {proc.communicate()[1]}") from None
            time.sleep(0.3)


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    return stderr


def test_serve_opens_the_store_and_closes_it_at_shutdown(tmp_path: Path) -> None:
    path = tmp_path / "responses.sqlite3"
    proc, _ = _start(["--responses-store", str(path)], {})
    try:
        assert path.exists() and Path(f"{path}-wal").exists()  # open, in WAL mode
    finally:
        stderr = _stop(proc)
    assert f"responses stored in SQLite file {path}" in stderr
    assert not Path(f"{path}-wal").exists()  # closed: the last connection out removes the WAL


def test_serve_names_a_postgres_store_without_its_password(postgres: PostgresServer) -> None:
    url = postgres.create_schema("serve_option").replace("afm@", "afm:pw-4e1b9a@")
    proc, _ = _start([], {STORE_ENV: url})
    stderr = _stop(proc)
    assert f"responses stored in PostgreSQL database postgres on 127.0.0.1:{postgres.port} as afm" in stderr
    assert "pw-4e1b9a" not in stderr
