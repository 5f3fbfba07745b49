"""Stored responses shared by a cluster: three scripted replicas behind a real HAProxy, all on one
real PostgreSQL store (Debian's binaries, a throwaway server on a free port), over the Responses
API.  ``previous_response_id`` continues on whichever replica the balancer picks, a replica killed
with SIGKILL loses no acknowledged response, and concurrent writes through the three replicas
lose nothing (rows counted in PostgreSQL).

Skipped with the reason where PostgreSQL or HAProxy is missing (``make setup`` installs both on
Debian).  Each test prints its counts (``pytest -s``): docs/deploy.md quotes them.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import signal
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from afm_struct.cli.cluster_ports import free_port
from afm_struct.cli.cluster_supervisor import Cluster
from tests.postgres_server import PostgresServer, unavailable_reason

from .conftest import AUTH, KEY, async_client, run

if unavailable_reason() is not None:
    pytest.skip(f"no PostgreSQL: {unavailable_reason()}", allow_module_level=True)

REPLICAS = ("r1", "r2", "r3")
CHAINS_PER_ROUND = 24
CONCURRENT_WRITES = 90
_markers = itertools.count()


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    """A real PostgreSQL server for this module."""
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def store_url(pg: PostgresServer) -> str:
    """The cluster's store: an empty schema of that server."""
    return pg.create_schema("cluster_store")


@pytest.fixture(scope="module")
def pg_cluster(store_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three scripted replicas sharing ``store_url`` behind HAProxy (a killed one stays down:
    its restart would only cost the test time)."""
    # Room for every request of a test at once (no 503 to tell apart from a loss).
    args = ["--model", "scripted:200", "--log-level", "warning", "--max-queue", "64"]
    c = Cluster(3, free_port(), args, api_keys=(KEY,),
                log=lambda _line: None, run_dir=tmp_path_factory.mktemp("pg-cluster"),
                responses_store=store_url, restart=False)
    c.start()
    yield c
    c.stop()


async def _create(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> httpx.Response | None:
    """POST /v1/responses; None when the connection broke (no answer: not acknowledged)."""
    try:
        return await client.post(f"{url}/v1/responses", json={"max_output_tokens": 6, **body}, headers=AUTH)
    except httpx.HTTPError:
        return None


async def _create_all(url: str, bodies: list[dict[str, Any]]) -> list[httpx.Response | None]:
    async with async_client() as client:
        return list(await asyncio.gather(*(_create(client, url, b) for b in bodies)))


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _explicit_history(first_input: str, first: dict[str, Any], second_input: str) -> list[dict[str, Any]]:
    """The conversation a continued turn renders, written out as its input items."""
    return [_user(first_input), *first["output"], _user(second_input)]


def test_previous_response_id_continues_on_whichever_replica_the_balancer_picks(pg_cluster: Cluster) -> None:
    """Rounds of two-turn chains until every ordered pair of replicas (first turn on one, second
    on another) has been seen; every second turn renders exactly its own first turn (its input
    tokens equal those of the same history sent whole), and any replica reads every turn."""
    url, rng = pg_cluster.url, random.Random(30)
    pairs: dict[tuple[str, str], int] = {}
    chains: list[tuple[str, dict[str, Any], str, dict[str, Any]]] = []
    for _round in range(6):
        # Different lengths: a turn rendered after another chain's first turn would count differently.
        firsts = [f"chain {next(_markers)} " + "word " * rng.randrange(1, 30)
                  for _ in range(CHAINS_PER_ROUND)]
        answers = run(_create_all(url, [{"input": text} for text in firsts]))
        assert all(a is not None and a.status_code == 200 for a in answers), answers
        order = list(range(CHAINS_PER_ROUND))
        rng.shuffle(order)  # not the first round's arrival order, so the balancer mixes the pairs
        seconds = [f"then {next(_markers)}" for _ in order]
        continued = run(_create_all(url, [{"input": seconds[i],
                                           "previous_response_id": answers[i].json()["id"]} for i in order]))
        for i, second in zip(order, continued, strict=True):
            assert second is not None and second.status_code == 200, second and second.text
            body, first = second.json(), answers[i].json()
            assert body["previous_response_id"] == first["id"]
            pair = (answers[i].headers["x-afm-replica"], second.headers["x-afm-replica"])
            pairs[pair] = pairs.get(pair, 0) + 1
            chains.append((firsts[i], first, seconds[i], body))
        if all((a, b) in pairs for a in REPLICAS for b in REPLICAS if a != b):
            break
    crossed = sum(n for (a, b), n in pairs.items() if a != b)
    print(f"\n[pg-store] {len(chains)} two-turn chains, {crossed} continued on another replica than "
          f"their first turn; pairs {dict(sorted(pairs.items()))}")
    assert all((a, b) in pairs for a in REPLICAS for b in REPLICAS if a != b), pairs

    # The same histories sent whole (not stored) count the same input tokens.
    sample = chains[:: max(1, len(chains) // 24)]
    whole = run(_create_all(url, [{"input": _explicit_history(f, first, s), "store": False}
                                  for f, first, s, _ in sample]))
    for (_, _, _, body), explicit in zip(sample, whole, strict=True):
        assert explicit is not None and explicit.status_code == 200, explicit and explicit.text
        assert body["usage"]["input_tokens"] == explicit.json()["usage"]["input_tokens"]

    # Every replica, asked directly (not through the balancer), reads every stored turn.
    read = 0
    with httpx.Client(headers=AUTH, timeout=30) as client:
        for replica in pg_cluster.members:
            for _, first, _, second in chains:
                for stored in (first, second):
                    got = client.get(f"{replica.url}/v1/responses/{stored['id']}")
                    assert got.status_code == 200 and got.json() == stored, (replica.name, got.text)
                    read += 1
    print(f"[pg-store] {read} reads of {2 * len(chains)} stored responses from each of the 3 replicas "
          f"directly: all equal to what was acknowledged")


def _row_count(store_url: str, ids: list[str] | None = None) -> int:
    import psycopg

    with psycopg.connect(store_url) as conn:
        if ids is None:
            return conn.execute("SELECT count(*) FROM responses").fetchone()[0]
        return conn.execute("SELECT count(*) FROM responses WHERE id = ANY(%s)", (ids,)).fetchone()[0]


def test_concurrent_writes_from_three_replicas_lose_nothing(pg_cluster: Cluster, store_url: str) -> None:
    """N requests at once through the balancer: exactly one row per acknowledged response, and
    every replica wrote some."""
    before = _row_count(store_url)
    answers = run(_create_all(pg_cluster.url, [{"input": f"write {next(_markers)}"}
                                               for _ in range(CONCURRENT_WRITES)]))
    refused = [a and a.text for a in answers if a is None or a.status_code != 200]
    assert not refused, refused
    ids = [a.json()["id"] for a in answers]
    by_replica = {name: sum(a.headers["x-afm-replica"] == name for a in answers) for name in REPLICAS}
    assert len(set(ids)) == CONCURRENT_WRITES and all(by_replica.values()), by_replica
    assert _row_count(store_url, ids) == CONCURRENT_WRITES
    assert _row_count(store_url) - before == CONCURRENT_WRITES
    print(f"\n[pg-store] {CONCURRENT_WRITES} concurrent stored responses through the balancer "
          f"(per replica {by_replica}): {_row_count(store_url, ids)} rows in PostgreSQL")


def test_a_killed_replica_loses_no_stored_response(pg_cluster: Cluster) -> None:
    """Traffic, then r2 killed with SIGKILL while more is in flight: every response acknowledged
    before or during the kill (r2's own included) reads back whole through the balancer."""
    url, victim = pg_cluster.url, pg_cluster.members[1]
    before = run(_create_all(url, [{"input": f"before {next(_markers)}"} for _ in range(45)]))
    assert all(a is not None and a.status_code == 200 for a in before)
    assert any(a.headers["x-afm-replica"] == victim.name for a in before)

    held_at_kill = 0

    async def traffic_with_kill() -> list[httpx.Response | None]:
        nonlocal held_at_kill
        async with async_client() as client:
            # Short answers and long ones (0.5 s at 200 tokens/s): r2 dies having acknowledged some
            # of this traffic and holding more.
            tasks = [asyncio.create_task(_create(client, url, {"input": f"during {next(_markers)}",
                                                               "max_output_tokens": 100 if k % 2 else 3}))
                     for k in range(45)]
            for _ in range(500):
                await asyncio.sleep(0.02)
                answered = any(t.done() and t.result() is not None
                               and t.result().headers.get("x-afm-replica") == victim.name for t in tasks)
                health = (await client.get(f"{victim.url}/health")).json()
                held_at_kill = health["requests_in_flight"]
                if answered and held_at_kill:
                    break
            assert victim.pid is not None
            os.kill(victim.pid, signal.SIGKILL)
            return list(await asyncio.gather(*tasks))

    during = run(traffic_with_kill())
    acknowledged = [a for a in before + during if a is not None and a.status_code == 200]
    from_victim = sum(a.headers["x-afm-replica"] == victim.name for a in acknowledged)
    during_on_victim = sum(a is not None and a.headers.get("x-afm-replica") == victim.name for a in during)
    lost_in_flight = len(before) + len(during) - len(acknowledged)
    # Read back through the balancer with r2 dead (the store outlives it).
    with httpx.Client(headers=AUTH, timeout=30) as client:
        back = [client.get(f"{url}/v1/responses/{a.json()['id']}") for a in acknowledged]
    missing = [a.json()["id"] for a, got in zip(acknowledged, back, strict=True)
               if got.status_code != 200 or got.json() != a.json()]
    print(f"\n[pg-store] SIGKILL of {victim.name}: {len(acknowledged)} responses acknowledged "
          f"({from_victim} by {victim.name}, {during_on_victim} of them in the traffic it died in, "
          f"holding {held_at_kill} more), "
          f"{lost_in_flight} in flight without an answer (HAProxy retries the others); "
          f"{len(acknowledged) - len(missing)} read back after the kill")
    assert not missing
    assert during_on_victim and held_at_kill  # it was killed with answers just sent and work in hand
    assert victim.process is not None and victim.process.wait(timeout=10) == -signal.SIGKILL
