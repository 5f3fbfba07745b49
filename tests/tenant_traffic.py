"""Random multi-tenant traffic with cancels (issue 32), for a server or a cluster behind HAProxy.

A plan (:func:`plans`, hypothesis) holds several tenants' streams under IDs drawn from a small
pool, so tenants share IDs; cancels by random tenants of random IDs (their own, another tenant's,
one nobody used); then each owner cancels some of its streams and leaves the others to finish.
:func:`run_plan` plays it over real HTTP and checks:

* a cancel by a tenant that runs no stream under that ID answers exactly as an unknown ID
  (404, the same body), whoever else runs that ID;
* a stream ends ``cancelled`` exactly when a cancel by its owner was answered 200, and otherwise
  runs to its end (so no cancel ever reached another tenant's request);
* an owner's cancel is answered 200, or 404 "has already completed" by the replica that ran the
  stream: never "unknown" (through a balancer, that would be a cancel routed elsewhere);
* every stream is well framed and ends with [DONE].
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from typing import Any

import httpx
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

ID_POOL = ("job-1", "job-2", "job-3", "victim-123")


def examples(default: int) -> int:
    """How many examples: ``AFM_STRUCT_RANDOM_EXAMPLES`` overrides the CI-sized default."""
    return int(os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES", "0")) or default


def traffic_settings(default_examples: int) -> settings:
    """Reproducible in CI: derandomized, no example database, no deadline."""
    return settings(max_examples=examples(default_examples), deadline=None, derandomize=True,
                    database=None, suppress_health_check=list(HealthCheck))


@dataclass(frozen=True)
class Plan:
    """Streams (tenant index, ID), random cancels (tenant index, ID), and which streams their
    owner cancels at the end (the others finish on their own)."""

    streams: tuple[tuple[int, str], ...]
    cancels: tuple[tuple[int, str], ...]
    owner_cancels: tuple[bool, ...]


def plans(tenants: int, ids: tuple[str, ...] = ID_POOL) -> st.SearchStrategy[Plan]:
    """Plans over ``tenants`` tenants and IDs from ``ids`` (fewer IDs, more shared ones): 1-6
    streams, 0-10 random cancels."""
    pair = st.tuples(st.integers(0, tenants - 1), st.sampled_from(ids))

    @st.composite
    def build(draw: st.DrawFn) -> Plan:
        streams = tuple(draw(st.lists(pair, min_size=1, max_size=6, unique=True)))
        cancel_ids = st.sampled_from([*ids, "nobody-ran-this"])
        cancels = tuple(draw(st.lists(st.tuples(st.integers(0, tenants - 1), cancel_ids), max_size=10)))
        owner_cancels = tuple(draw(st.lists(st.booleans(), min_size=len(streams), max_size=len(streams))))
        return Plan(streams, cancels, owner_cancels)

    return build()


@dataclass
class Outcome:
    """What one stream's client saw."""

    status: int = 0
    finish: str | None = None
    done: bool = False


async def _stream(client: httpx.AsyncClient, url: str, headers: dict[str, str], body: dict[str, Any],
                  running: asyncio.Event, out: Outcome) -> None:
    async with client.stream("POST", f"{url}/v1/chat/completions", headers=headers,
                             json={**body, "stream": True}) as response:
        out.status = response.status_code
        if response.status_code != 200:
            running.set()
            await response.aread()
            return
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            running.set()
            payload = line[len("data: "):]
            assert not out.done, "an event after [DONE]"
            if payload == "[DONE]":
                out.done = True
                continue
            event = json.loads(payload)
            if event.get("choices") and event["choices"][0].get("finish_reason"):
                assert out.finish is None, "two finish chunks"
                out.finish = event["choices"][0]["finish_reason"]


async def _cancels(plan: Plan, outcomes: list[Outcome], events: list[asyncio.Event], cancel: Any,
                   reference: dict[str, Any], never: str, tag: str) -> set[tuple[int, str]]:
    """Once every stream runs: the random cancels, then the owners'; the (tenant, ID) pairs
    whose cancel was answered 200."""
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in events)), 60)
    assert all(o.status == 200 for o in outcomes), [o.status for o in outcomes]
    accepted: set[tuple[int, str]] = set()
    owned = set(plan.streams)
    for t, rid in plan.cancels:
        r = await cancel(t, rid)
        if (t, rid) in owned:
            _owners_answer(r, t, rid, accepted)
        else:  # this tenant runs nothing under rid, whoever else does
            assert r.status_code == 404, (t, rid, r.text)
            assert r.json() == _unknown_body(reference, never, f"{tag}{rid}"), r.text
    for (t, rid), mine in zip(plan.streams, plan.owner_cancels, strict=True):
        if mine:
            _owners_answer(await cancel(t, rid), t, rid, accepted)
    return accepted


def _owners_answer(r: httpx.Response, t: int, rid: str, accepted: set[tuple[int, str]]) -> None:
    """An owner's cancel of its running stream: 200, or 404 because the stream has just
    completed, said by the replica that ran it (one that never saw it would say "unknown": the
    cancel went to the wrong place)."""
    if r.status_code == 200:
        accepted.add((t, rid))
        return
    assert r.status_code == 404 and "has already completed" in r.json()["error"]["message"], \
        (t, rid, r.text)


def _unknown_body(reference: dict[str, Any], never: str, request_id: str) -> dict[str, Any]:
    return json.loads(json.dumps(reference).replace(never, request_id))  # type: ignore[no-any-return]


async def run_plan(url: str, keys: tuple[str, ...], plan: Plan, body: dict[str, Any], tag: str) -> None:
    """Play ``plan`` against ``url`` (tenant i uses ``keys[i]``; IDs get the prefix ``tag`` so
    examples do not meet each other's completed IDs) and check the invariants above."""
    def auth(t: int, rid: str | None = None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {keys[t]}"}
        return {**headers, "X-Request-ID": f"{tag}{rid}"} if rid else headers

    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        async def cancel(t: int, rid: str) -> httpx.Response:
            return await client.post(f"{url}/v1/chat/completions/{tag}{rid}/cancel", headers=auth(t))

        never = f"{tag}never-sent"
        reference = await client.post(f"{url}/v1/chat/completions/{never}/cancel", headers=auth(0))
        assert reference.status_code == 404

        outcomes = [Outcome() for _ in plan.streams]
        events = [asyncio.Event() for _ in plan.streams]
        tasks = [asyncio.create_task(_stream(client, url, auth(t, rid), body, ev, out))
                 for (t, rid), ev, out in zip(plan.streams, events, outcomes, strict=True)]
        try:
            accepted = await _cancels(plan, outcomes, events, cancel, reference.json(), never, tag)
            await asyncio.wait_for(asyncio.gather(*tasks), 60)
        finally:  # a failed check leaves no stream running into the next example
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    for (t, rid), out in zip(plan.streams, outcomes, strict=True):
        assert out.done, (t, rid)
        if (t, rid) in accepted:
            assert out.finish == "cancelled", (t, rid, out.finish)
        else:  # no cancel of its owner was accepted: nobody else's may have reached it
            assert out.finish in ("stop", "length"), (t, rid, out.finish, sorted(accepted))
