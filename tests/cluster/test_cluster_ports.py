"""The ports a cluster picks for itself: one taken by another process before HAProxy binds it
is picked again, not an exit (CI saw ``cannot bind socket`` for the metrics port under xdist)."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx

from afm_struct.cli.cluster_ports import free_port
from afm_struct.cli.cluster_supervisor import Cluster


def test_a_metrics_port_taken_before_haproxy_starts_is_picked_again(tmp_path: Path) -> None:
    said: list[str] = []
    c = Cluster(1, free_port(), ["--model", "scripted:20", "--log-level", "warning"],
                log=said.append, run_dir=tmp_path)
    picked = c.metrics_port
    assert picked is not None
    with socket.socket() as thief:  # another process takes the port in between
        thief.bind(("127.0.0.1", picked))
        thief.listen()
        try:
            c.start()
            assert c.metrics_port != picked
            assert any(f"metrics port {picked} was taken" in line for line in said), said
            assert httpx.get(f"{c.url}/health", timeout=5).status_code == 200
            assert httpx.get(f"http://127.0.0.1:{c.metrics_port}/metrics", timeout=5).status_code == 200
        finally:
            c.stop(grace_s=5)
