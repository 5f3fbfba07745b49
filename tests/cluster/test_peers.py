"""Two balancers in front of the same replicas share the cancel table (HAProxy ``peers``): a
stream started through one is cancelled through the other (real processes, real HTTP)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from afm_struct.cli.cluster_ports import free_port
from afm_struct.cli.cluster_supervisor import Cluster

from .conftest import AUTH, KEY, StreamResult, async_client, run, stream

STREAMS = 6


def admin(sock: Path, command: str) -> str:
    """One command on an HAProxy admin socket; its answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(2.0)
        s.connect(str(sock))
        s.sendall(command.encode() + b"\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data.decode()


@pytest.fixture
def two_balancers(tmp_path: Path) -> Iterator[tuple[Cluster, str, Path]]:
    """A 2-replica cluster whose HAProxy is peer ``a``, and a second HAProxy, peer ``b``, over
    the same replicas (rendered from the same template); (cluster, b's URL, b's socket)."""
    peers = (("a", f"127.0.0.1:{free_port()}"), ("b", f"127.0.0.1:{free_port()}"))
    c = Cluster(2, free_port(), ["--model", "scripted:50", "--log-level", "warning"], api_keys=(KEY,),
                log=lambda _line: None, run_dir=tmp_path, peers=peers, local_peer="a")
    c.start()
    port_b, sock_b = free_port(), tmp_path / "b.sock"
    config_b = tmp_path / "b.cfg"
    config_b.write_text(c.render_config(bind=f"127.0.0.1:{port_b}", stats_socket=sock_b,
                                        metrics_port=free_port()))
    assert c.haproxy is not None
    b = subprocess.Popen([c.haproxy, "-db", "-L", "b", "-f", str(config_b)], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url_b = f"http://127.0.0.1:{port_b}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url_b}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert b.poll() is None and time.monotonic() < deadline, "the second balancer did not start"
            time.sleep(0.1)
        yield c, url_b, sock_b
    finally:
        b.terminate()
        b.wait(timeout=10)
        c.stop(grace_s=10)


def test_a_cancel_through_the_other_balancer_reaches_the_stream(two_balancers) -> None:
    cluster, url_b, sock_b = two_balancers

    async def main() -> tuple[list[StreamResult], list[httpx.Response]]:
        async with async_client() as client:
            started = asyncio.Event()
            seen: list[StreamResult] = []

            async def first(result: StreamResult) -> None:
                seen.append(result)
                if len(seen) == STREAMS:
                    started.set()

            tasks = [asyncio.create_task(stream(client, cluster.url, 1500, on_first=first,
                                                headers={"X-Request-ID": f"peer-{i}"}))
                     for i in range(STREAMS)]
            await asyncio.wait_for(started.wait(), 60)
            # Balancer b learns every ID from a through the peers protocol (no request to b).
            # The table's keys are "<request ID>/<owner>" (deploy/haproxy.cfg).
            deadline = time.monotonic() + 10
            while not all(f"key=peer-{i}/" in admin(sock_b, "show table replicas") for i in range(STREAMS)):
                assert time.monotonic() < deadline, admin(sock_b, "show table replicas")
                await asyncio.sleep(0.05)
            cancels = [await client.post(f"{url_b}/v1/chat/completions/peer-{i}/cancel", headers=AUTH)
                       for i in range(STREAMS)]
            return list(await asyncio.gather(*tasks)), cancels

    results, cancels = run(main())
    assert {r.replica for r in results} == {"r1", "r2"}  # both replicas hold streams
    assert all(c.status_code == 200 and c.json()["cancelled"] for c in cancels), [c.text for c in cancels]
    assert all(r.complete and r.finish_reason == "cancelled" for r in results)
