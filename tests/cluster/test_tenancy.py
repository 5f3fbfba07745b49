"""Tenants through HAProxy (issue 32): two keys, three scripted replicas, real processes.

HAProxy routes a cancel by its ID *and* a digest of its key, so another tenant's cancel neither
reaches the replica holding the stream nor learns which one it is, and two tenants running the
same ID each cancel their own stream wherever it runs.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Awaitable, Callable

import httpx
from hypothesis import given

from afm_struct.cli.cluster_supervisor import Cluster

from ..tenant_traffic import Plan, plans, run_plan, traffic_settings
from .conftest import AUTH, AUTH_B, KEY, KEY_B, USER, StreamResult, async_client, run, stream


def _unknown(client_url: str, auth: dict[str, str], request_id: str) -> dict[str, object]:
    """The body an ID nobody sent gets, written for ``request_id``."""
    never = f"never-{request_id}"
    r = httpx.post(f"{client_url}/v1/chat/completions/{never}/cancel", headers=auth)
    assert r.status_code == 404
    return json.loads(r.text.replace(never, request_id))  # type: ignore[no-any-return]


def test_another_tenants_cancel_through_the_balancer_is_an_unknown_id(cluster: Cluster) -> None:
    attempts: list[httpx.Response] = []
    direct: list[httpx.Response] = []

    async def main() -> StreamResult:
        async with async_client() as client:
            async def intrude(result: StreamResult) -> None:
                for _ in range(3):
                    attempts.append(await client.post(
                        f"{cluster.url}/v1/chat/completions/victim-123/cancel", headers=AUTH_B))
                # Straight at the replica that holds the stream: the replica says the same.
                holder = next(r for r in cluster.members if r.name == result.replica)
                direct.append(await client.post(f"{holder.url}/v1/chat/completions/victim-123/cancel",
                                                headers=AUTH_B))
            return await stream(client, cluster.url, 60, on_first=intrude,
                                headers={"X-Request-ID": "victim-123"})

    victim = run(main())
    unknown = _unknown(cluster.url, AUTH_B, "victim-123")
    for response in (*attempts, *direct):
        assert response.status_code == 404 and response.json() == unknown, response.text
    # Untouched: every token to max_tokens, not cancelled.
    assert victim.complete and victim.finish_reason == "length", (victim.finish_reason, victim.error)


def test_two_tenants_with_one_id_are_each_routed_to_their_own_stream(cluster: Cluster) -> None:
    """Six IDs, each streamed by both tenants at once (leastconn spreads the twelve streams);
    each tenant cancels its own through the balancer, which must pick the replica holding that
    tenant's stream.  The case that matters is one ID's two streams on different replicas;
    leastconn's spread depends on timing (once seen to pair every ID on one replica), so
    rounds repeat, with new IDs, until one has such a split (at most three)."""
    for attempt in range(3):
        if _one_round_of_shared_ids(cluster, [f"shared-{attempt}-{i}" for i in range(6)]):
            return
    raise AssertionError("in three rounds, every ID's two streams ran on one replica")


def _one_round_of_shared_ids(cluster: Cluster, ids: list[str]) -> bool:
    """Both tenants stream every ID of ``ids`` and each cancels its own: every cancel must be
    accepted and every stream end cancelled.  Whether some ID's streams ran on two replicas."""
    cancels: dict[tuple[str, str], httpx.Response] = {}

    async def main() -> list[tuple[str, str, StreamResult]]:
        async with async_client() as client:
            started = asyncio.Event()
            ready = 0

            def on_first_for(tenant: str, rid: str, auth: dict[str, str]
                             ) -> Callable[[StreamResult], Awaitable[None]]:
                async def on_first(_result: StreamResult) -> None:
                    nonlocal ready
                    ready += 1
                    if ready == 2 * len(ids):
                        started.set()
                    await started.wait()  # every stream is in flight before any cancel
                    cancels[(tenant, rid)] = await client.post(
                        f"{cluster.url}/v1/chat/completions/{rid}/cancel", headers=auth)
                return on_first

            jobs = [(tenant, rid, auth) for rid in ids for tenant, auth in (("a", AUTH), ("b", AUTH_B))]
            results = await asyncio.gather(*(
                stream(client, cluster.url, 1500, headers={**auth, "X-Request-ID": rid},
                       on_first=on_first_for(tenant, rid, auth))
                for tenant, rid, auth in jobs))
            return [(t, rid, r) for (t, rid, _), r in zip(jobs, results, strict=True)]

    results = run(main())
    assert len(cancels) == 12
    for (tenant, rid), response in cancels.items():
        assert response.status_code == 200 and response.json()["cancelled"] is True, \
            (tenant, rid, response.text)
    for tenant, rid, result in results:
        assert result.complete and result.finish_reason == "cancelled", (tenant, rid, result.finish_reason)
    replicas = {(t, rid): r.replica for t, rid, r in results}
    return any(replicas[("a", rid)] != replicas[("b", rid)] for rid in ids)


_EXAMPLES = itertools.count()


def test_random_cancels_never_reach_another_tenant_through_the_balancer(cluster: Cluster) -> None:
    """tests/tenant_traffic.py through HAProxy: two tenants, two IDs (so most are shared),
    random cancels."""
    keys = (KEY, KEY_B)

    @traffic_settings(default_examples=6)
    @given(plan=plans(len(keys), ids=("job-1", "victim-123")))
    def check(plan: Plan) -> None:
        asyncio.run(run_plan(cluster.url, keys, plan, {"messages": USER, "max_tokens": 30},
                             f"c{next(_EXAMPLES)}-"))

    check()
