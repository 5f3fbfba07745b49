"""``afm-struct cluster``: options passed to replicas, errors a user can act on, and SIGTERM
stopping HAProxy and every replica (a real run of the command)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from afm_struct.cli import build_parser
from afm_struct.cli import cluster as cluster_cli
from afm_struct.cli import cluster_supervisor as supervisor
from afm_struct.cli.cluster import forwarded_args
from afm_struct.cli.cluster_ports import free_port
from afm_struct.cli.cluster_supervisor import MAX_SOCKET_PATH, Cluster, ClusterError
from afm_struct.cli.serve import STORE_ENV
from server.auth import ENV_VAR, load_api_keys
from server.tenants import ApiKey

EXE = str(Path(sys.executable).with_name("afm-struct"))


def test_serve_options_are_forwarded_and_keys_are_not() -> None:
    args = build_parser().parse_args([
        "cluster", "--replicas", "3", "--port", "8080", "--model", "scripted:80", "--max-queue", "4",
        "--served-model-name", "a", "--served-model-name", "b", "--no-close-on-length",
        "--api-key", "secret", "--log-level", "warning"])
    assert (args.replicas, args.port) == (3, 8080)
    forwarded = forwarded_args(args, args.serve_actions)
    assert forwarded == ["--model", "scripted:80", "--served-model-name", "a", "--served-model-name", "b",
                         "--log-level", "warning", "--max-queue", "4", "--no-close-on-length"]
    assert "secret" not in forwarded


def test_keys_reach_the_replicas_with_their_names_and_haproxy_keys_cancels_on_the_owner(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The replicas get the keys (named as in the key file) in their environment; the config
    routes cancels by ID and key digest with keys, by ID alone without (one tenant)."""
    keyed = Cluster(2, 18082, ["--model", "scripted"], run_dir=tmp_path,
                    api_keys=(ApiKey("sk-a", name="acme"), "sk-b"))
    config = keyed.render_config()
    assert f"http-request set-var(txn.owner) {supervisor.OWNER_FROM_KEY}" in config
    assert "stick match path,field(5,/),url_dec,concat(/,txn.owner) if is_cancel" in config
    assert "sk-a" not in config and "acme" not in config
    seen: dict[str, str] = {}

    class Recorder:
        def __init__(self, cmd: list[str], **kwargs: object) -> None:
            seen.update(kwargs["env"])  # type: ignore[arg-type]
            seen["cmd"] = " ".join(cmd)
            self.pid = 0

    monkeypatch.setattr(supervisor.subprocess, "Popen", Recorder)
    keyed._spawn_replica(keyed.members[0])
    assert load_api_keys([], None, {ENV_VAR: seen[ENV_VAR]}) == keyed.api_keys
    assert [k.name for k in keyed.api_keys] == ["acme", None]
    assert "sk-a" not in seen["cmd"]
    open_config = Cluster(2, 18083, run_dir=tmp_path).render_config()
    assert f"set-var(txn.owner) {supervisor.OWNER_WITHOUT_KEYS}" in open_config


def test_the_response_store_reaches_the_replicas_in_their_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PostgreSQL URL holds a password: on a replica's command line `ps` would show it, so the
    cluster hands it over in AFM_STRUCT_RESPONSES_STORE, like the keys."""
    url = "postgresql://afm:s3cret@db:5432/afm"
    args = build_parser().parse_args(["cluster", "--model", "scripted", "--responses-store", url])
    assert forwarded_args(args, args.serve_actions) == ["--model", "scripted"]
    c = Cluster(2, 18084, ["--model", "scripted"], run_dir=tmp_path, responses_store=url)
    seen: dict[str, str] = {}

    class Recorder:
        def __init__(self, cmd: list[str], **kwargs: object) -> None:
            seen.update(kwargs["env"])  # type: ignore[arg-type]
            seen["cmd"] = " ".join(cmd)
            self.pid = 0

    monkeypatch.setenv(STORE_ENV, "/somewhere/else.sqlite3")  # the cluster's option wins
    monkeypatch.setattr(supervisor.subprocess, "Popen", Recorder)
    c._spawn_replica(c.members[0])
    assert seen[STORE_ENV] == url and "s3cret" not in seen["cmd"]


def test_cluster_refuses_a_store_it_cannot_open_before_starting_replicas(tmp_path: Path) -> None:
    """One line naming the store, exit 1, no replica started and no run directory left."""
    (tmp_path / "dir.sqlite3").mkdir()
    result = subprocess.run([EXE, "cluster", "--replicas", "2", "--port", str(free_port()),
                             "--model", "scripted", "--responses-store", str(tmp_path / "dir.sqlite3")],
                            capture_output=True, text=True, timeout=60,
                            env={**os.environ, "TMPDIR": str(tmp_path)})
    assert result.returncode == 1, result.stderr
    assert "dir.sqlite3" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.glob("afm-cluster-*"))


def test_missing_haproxy_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervisor.shutil, "which", lambda _name: None)
    with pytest.raises(ClusterError, match=r"apt-get install -y haproxy.*brew install haproxy"):
        Cluster(2, free_port())


def test_template_renders_every_replica_and_rejects_unknown_placeholders(tmp_path: Path) -> None:
    c = Cluster(3, 18080, run_dir=tmp_path)
    config = c.render_config()
    assert "bind 127.0.0.1:18080" in config and "retries 2" in config
    assert not [line for line in config.splitlines() if "${" in line and not line.startswith("#")]
    names = [m.group(1) for m in re.finditer(r"server (r\d) 127\.0\.0\.1:\d+ id \d", config)]
    assert names == ["r1", "r2", "r3"]
    bad = tmp_path / "bad.cfg"
    bad.write_text("bind ${nope}\n")
    with pytest.raises(ClusterError, match="placeholder"):
        Cluster(1, 18081, run_dir=tmp_path, template=bad).render_config()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigterm_stops_haproxy_and_every_replica(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen([EXE, "cluster", "--replicas", "1", "--port", str(port),
                             "--model", "scripted:200", "--log-level", "warning", "--api-key", "k",
                             "--run-dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 90
        while not any("serving on" in line for line in lines):
            line = proc.stderr.readline()
            assert line and time.monotonic() < deadline, "".join(lines)
            lines.append(line)
        response = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=30,
                              headers={"Authorization": "Bearer k"},
                              json={"messages": [{"role": "user", "content": "x"}], "max_tokens": 3})
        assert response.status_code == 200 and response.headers["x-afm-replica"] == "r1"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=30)
    pids = [int(p) for p in re.findall(r"pid (\d+)", "".join(lines))]
    assert len(pids) == 2  # the replica and HAProxy
    assert proc.returncode == 0, rest
    assert not [p for p in pids if _alive(p)]
    assert (tmp_path / "haproxy.cfg").is_file() and (tmp_path / "r1.log").is_file()


def test_maxconn_fits_the_open_files_limit(monkeypatch) -> None:
    """HAProxy refuses to start when it cannot raise its descriptor limit to what maxconn needs
    (seen under `make test` with a limit of 2048): maxconn follows the limit."""
    import resource

    from afm_struct.cli.cluster_supervisor import haproxy_maxconn

    monkeypatch.setattr(resource, "getrlimit", lambda _r: (2048, 2048))
    monkeypatch.setattr(resource, "setrlimit", lambda _r, _v: None)
    assert haproxy_maxconn() == (2048 - 256) // 2
    monkeypatch.setattr(resource, "getrlimit", lambda _r: (1024, 65536))
    assert haproxy_maxconn() == 4096  # the soft limit is raised to the hard one first


def _start(args: list[str], tmp: Path) -> tuple[subprocess.Popen[str], list[str]]:
    """Run ``afm-struct cluster ARGS`` (temporary files under ``tmp``) until it says it is
    serving; (process, its stderr lines)."""
    proc = subprocess.Popen([EXE, "cluster", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "TMPDIR": str(tmp)})
    assert proc.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + 90
    while not any("serving on" in line for line in lines):
        line = proc.stderr.readline()
        if not line or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("".join(lines) + proc.stderr.read())
        lines.append(line)
    return proc, lines


def test_pinned_replica_ports_and_the_run_directory_goes_on_a_clean_exit(tmp_path: Path) -> None:
    port, pinned = free_port(), (free_port(), free_port())
    proc, lines = _start(["--replica-ports", f"{pinned[0]},{pinned[1]}", "--port", str(port),
                          "--model", "scripted:200", "--log-level", "warning"], tmp_path)
    try:
        run_dir = Path(re.search(r"config (\S+)/haproxy\.cfg", "".join(lines)).group(1))  # type: ignore[union-attr]
        assert run_dir.parent == tmp_path and (run_dir / "r1.log").is_file()
        replicas = re.findall(r"replica (r\d): pid \d+, http://127\.0\.0\.1:(\d+)", "".join(lines))
        assert replicas == [("r1", str(pinned[0])), ("r2", str(pinned[1]))]  # --replicas follows the ports
        for p in pinned:
            assert httpx.get(f"http://127.0.0.1:{p}/health", timeout=10).status_code == 200
        seen = {httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=30,
                           json={"messages": [{"role": "user", "content": "x"}], "max_tokens": 2},
                           ).headers["x-afm-replica"] for _ in range(6)}
        assert seen <= {"r1", "r2"} and seen
    finally:
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=30)
    assert proc.returncode == 0, rest
    assert not run_dir.exists(), f"{run_dir} left behind: {os.listdir(run_dir)}"


def test_a_failed_start_keeps_the_run_directory_with_the_logs(tmp_path: Path) -> None:
    done = subprocess.run([EXE, "cluster", "--replicas", "1", "--port", str(free_port()),
                           "--model", "/nonexistent/model.gguf"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TMPDIR": str(tmp_path)})  # its run directory goes there
    assert done.returncode == 1
    (run_dir,) = tmp_path.glob("afm-cluster-*")
    assert f"keeping {run_dir} (it failed)" in done.stderr, done.stderr
    assert (run_dir / "r1.log").is_file() and str(run_dir / "r1.log") in done.stderr


@pytest.mark.parametrize(("argv", "message"), [
    (["--replicas", "3", "--replica-ports", "8101,8102"], "lists 2 ports for 3 replicas"),
    (["--replica-ports", "8101,8101"], "port 8101 is given twice"),
    (["--port", "8102", "--replica-ports", "8101,8102"], "port 8102 (replica r2) is HAProxy's --port"),
    (["--replica-ports", "8101,70000"], "70000 (replica r2) is not a TCP port"),
])
def test_bad_replica_ports_are_refused_before_anything_starts(argv, message, capsys, monkeypatch,
                                                             tmp_path: Path) -> None:
    from afm_struct.cli import main

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert main(["cluster", *argv]) == 1
    err = capsys.readouterr().err
    assert message in err and err.startswith("afm-struct: error: --replica-ports")
    assert not list(tmp_path.glob("afm-cluster-*"))  # no run directory made


def test_a_replica_port_in_use_is_refused(capsys) -> None:
    from afm_struct.cli import main

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        assert main(["cluster", "--replica-ports", f"{free_port()},{taken}"]) == 1
    assert f"port {taken} (replica r2) is already in use" in capsys.readouterr().err


def test_replica_ports_must_be_numbers() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["cluster", "--replica-ports", "8101,x"])


def test_the_default_replica_count_is_what_the_docs_and_makefile_say(capsys) -> None:
    root = Path(__file__).resolve().parents[2]
    makefile = re.search(r"^REPLICAS \?= (\d+)$", (root / "Makefile").read_text(), re.M)
    assert makefile and int(makefile.group(1)) == supervisor.DEFAULT_REPLICAS == 3
    assert cluster_cli.replica_count(build_parser().parse_args(["cluster"])) == 3
    assert cluster_cli.replica_count(build_parser().parse_args(["cluster", "--replica-ports", "1,2"])) == 2
    with pytest.raises(SystemExit):
        build_parser().parse_args(["cluster", "--help"])
    assert "(default 3," in capsys.readouterr().out


def test_a_deep_run_directory_keeps_the_stats_socket_short_enough_for_haproxy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)  # pytest-xdist's own tmp paths got this deep in CI
    monkeypatch.setenv("TMPDIR", str(deep))  # and TMPDIR with it (the CLI tests set it so)
    monkeypatch.setattr(tempfile, "tempdir", None)
    cluster = Cluster(1, free_port(), ["--model", "scripted:50"], log=lambda _line: None, run_dir=deep)
    assert len(str(cluster.stats_socket)) <= MAX_SOCKET_PATH
    assert cluster.haproxy is not None
    config = deep / "haproxy.cfg"
    config.write_text(cluster.render_config())
    check = subprocess.run([cluster.haproxy, "-c", "-f", str(config)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    socket_dir = cluster.stats_socket.parent
    cluster._remove_run_dir(keep=False)
    assert not socket_dir.exists()
