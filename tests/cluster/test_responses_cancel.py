"""A Responses API cancel through HAProxy reaches the replica running that response.

The response id is made up by the replica that serves it; it comes back in X-AFM-Response-ID
with the headers, and the balancer's cancel table keeps "{response id}/{owner}" → replica, as
it does for chat's X-Request-ID.  Without that, a cancel went to any replica: 2 of 3 times a
404 for a response that was running.
"""

from __future__ import annotations

import json
import queue
import threading
from typing import Any

import httpx

from afm_struct.cli.cluster_supervisor import Cluster

from .conftest import AUTH, AUTH_B

STREAMS = 6


def _consume(url: str, ids: queue.Queue[tuple[str, str]], out: dict[int, Any], n: int) -> None:
    events: list[dict[str, Any]] = []
    body = {"input": "count", "stream": True, "max_output_tokens": 400}
    with httpx.stream("POST", f"{url}/v1/responses", json=body, headers=AUTH, timeout=120) as r:
        replica = r.headers.get("x-afm-replica", "")
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[len("data: "):]))
                if len(events) == 1:
                    assert r.headers["x-afm-response-id"] == events[0]["response"]["id"]
                    ids.put((events[0]["response"]["id"], replica))
    out[n] = (replica, events)


def test_a_responses_cancel_reaches_the_replica_running_it(cluster: Cluster) -> None:
    ids: queue.Queue[tuple[str, str]] = queue.Queue()
    out: dict[int, Any] = {}
    readers = [threading.Thread(target=_consume, args=(cluster.url, ids, out, n)) for n in range(STREAMS)]
    for t in readers:
        t.start()
    started = [ids.get(timeout=60) for _ in range(STREAMS)]
    for rid, _replica in started:
        # Another tenant: like an unknown id, wherever it lands.
        assert httpx.post(f"{cluster.url}/v1/responses/{rid}/cancel", headers=AUTH_B).status_code == 404
        r = httpx.post(f"{cluster.url}/v1/responses/{rid}/cancel", headers=AUTH)
        assert r.status_code == 200, r.text
        assert r.json()["id"] == rid and r.json()["status"] == "cancelled"
    for t in readers:
        t.join(120)
    assert len(out) == STREAMS
    assert len({replica for replica, _ in out.values()}) > 1  # the balancer spread them
    for replica, events in out.values():
        last = events[-1]
        assert last["type"] == "response.incomplete" and last["response"]["status"] == "cancelled", \
            (replica, last["type"])
