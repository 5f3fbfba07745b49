"""``afm-struct cluster``: options passed to replicas, errors a user can act on, and SIGTERM
stopping HAProxy and every replica (a real run of the command)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from afm_struct.cli import build_parser
from afm_struct.cli import cluster as cluster_cli
from afm_struct.cli.cluster import Cluster, ClusterError, forwarded_args, free_port

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


def test_missing_haproxy_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_cli.shutil, "which", lambda _name: None)
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

    from afm_struct.cli.cluster import haproxy_maxconn

    monkeypatch.setattr(resource, "getrlimit", lambda _r: (2048, 2048))
    monkeypatch.setattr(resource, "setrlimit", lambda _r, _v: None)
    assert haproxy_maxconn() == (2048 - 256) // 2
    monkeypatch.setattr(resource, "getrlimit", lambda _r: (1024, 65536))
    assert haproxy_maxconn() == 4096  # the soft limit is raised to the hard one first
