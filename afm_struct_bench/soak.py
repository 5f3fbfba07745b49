"""``afm-struct bench soak``: random mixed traffic against a running server for N minutes.

The load benchmark (``bench serve``) sends the shapes it was written for; a soak sends shapes
nobody rehearsed.  Each of ``--concurrency`` workers loops until the deadline (or
``--max-requests``), drawing every request at random from a seeded generator: kind
(json_schema, json_object, strict tool, free), streamed or not, max_tokens, a context of random
length before the task (equal lengths, repeats and long prompts all occur), and what the client
does: read to the end, cancel by request ID after a few deltas, or disconnect mid-stream.
Every ``--burst-every`` seconds a burst larger than the server's capacity arrives at once (503
before streaming is expected).  With ``--hostile SHARE``, that fraction of the workers'
requests is drawn from the hostile kinds of :mod:`afm_struct_bench.hostile` instead (loopback
servers only); the ordinary draws stay the same as without.

Counted (afm_struct_bench.soak_summary): ordinary requests by outcome, errors (anything but
200 / 503 / the 400 refusing a budget below the shortest valid output, a stream that breaks the
contract or reports an error, a timeout: each one a harmed request, listed with its ID, its
times and the hostile requests in flight), 5xx and error chunks of any request, hostile results
per kind, invalid outputs (finished and invalid; cut by max_tokens and invalid, with or without
the downgrade header), TTFT p50/p99, and the server's resident memory (``/health``, every few
seconds): start, after warm-up (the first minute), peak, end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import logging
import random
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jsonschema

from .hostile import KINDS as HOSTILE_KINDS
from .hostile import Target, draw_hostile
from .hostile_client import calibrate, contract_violation, control_token_probe, send_hostile
from .serve import FILLER, PROMPTS, SCHEMAS, TOOL
from .soak_summary import markdown, summarize

__all__ = ["Hostility", "check_output", "draw_request", "markdown", "send", "soak"]

KINDS = ("json_schema", "json_object", "tool", "free")


def draw_request(rng: random.Random) -> dict[str, Any]:
    """One random request: its kind, body parameters, and what the client will do with it."""
    kind = rng.choice(KINDS)
    k = rng.randrange(len(SCHEMAS))
    words = rng.choice([0, 0, rng.randint(1, 30), rng.randint(30, 400)])
    context = " ".join(rng.choice(FILLER) for _ in range(words))
    task = PROMPTS[k] if kind != "tool" else "What is the weather in Paris, in celsius?"
    if kind == "json_object":
        task += " Answer with a JSON object."
    messages = [{"role": "user", "content": f"Context: {context}.\n\n{task}" if context else task}]
    params: dict[str, Any] = {"max_tokens": rng.choice([4, 16, 32, 64, 96]),
                              "temperature": rng.choice([0.0, 0.0, 0.7]), "seed": rng.randrange(1 << 30)}
    if rng.random() < 0.3:
        params["stop"] = [rng.choice(["\n\n", "}", "Paris", "."])]
    if kind == "json_schema":
        params["response_format"] = {"type": "json_schema", "json_schema": {
            "name": f"s{k}", "schema": SCHEMAS[k], "strict": True}}
    elif kind == "json_object":
        params["response_format"] = {"type": "json_object"}
    elif kind == "tool":
        params.update(tools=[TOOL], tool_choice="required", parallel_tool_calls=False)
    stream = rng.random() < 0.8
    action = rng.choices(["read", "cancel", "disconnect"], weights=[8, 1, 1])[0] if stream else "read"
    return {"kind": kind, "schema_index": k, "messages": messages, "params": params,
            "stream": stream, "action": action, "after": rng.randint(1, 12)}


def check_output(spec: dict[str, Any], result: Any) -> tuple[str | None, str | None]:
    """(why a finished output is invalid, or None; why a constrained output cut by max_tokens
    does not parse or validate, or None)."""
    kind = spec["kind"]
    cut = result.finish_reason == "length"
    if result.finish_reason == "cancelled" or kind == "free":
        return None, None
    if spec["params"].get("stop") and result.finish_reason == "stop" and kind != "tool":
        return None, None  # a stop string may end the JSON early: the client asked for that
    try:
        if kind == "tool":
            if not result.tool_calls:
                return (None, "tool: no tool call") if cut else ("no tool call", None)
            value = json.loads(result.tool_calls[0].arguments)
            jsonschema.validate(value, TOOL["function"]["parameters"])
        else:
            value = json.loads(result.content)
            if kind == "json_schema":
                jsonschema.validate(value, SCHEMAS[spec["schema_index"]])
            elif not isinstance(value, dict):
                raise ValueError(f"expected an object, got {type(value).__name__}")
    except (ValueError, jsonschema.ValidationError) as exc:
        why = f"{kind}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        return (None, why) if cut else (why, None)
    return None, None


async def send(client: Any, spec: dict[str, Any], rid: str | None = None) -> dict[str, Any]:
    """Send one request and do with it what ``spec["action"]`` says; one row of results."""
    from afm_struct.client import AfmClientError, AfmHTTPError

    rid = rid or f"soak-{uuid.uuid4().hex[:12]}"
    row: dict[str, Any] = {"kind": spec["kind"], "action": spec["action"], "stream": spec["stream"],
                           "rid": rid, "hostile": False, "status": None}
    start = time.perf_counter()

    def judge(result: Any) -> None:
        row["downgraded"] = result.headers.get("x-grammar-constraints") == "downgraded"
        row["invalid"], row["length_invalid"] = check_output(spec, result)

    try:
        if not spec["stream"]:
            result = await client.chat(spec["messages"], stream=False, request_id=rid, **spec["params"])
            row.update(outcome="completed", finish=result.finish_reason, status=200)
            judge(result)
            return row
        deltas = finishes = 0
        async with contextlib.aclosing(client.stream(spec["messages"], request_id=rid,
                                                     **spec["params"])) as events:
            async for event in events:
                row["status"] = 200
                broken = contract_violation(event, finishes)
                if broken:
                    row.update(outcome="error", error=broken)
                    return row
                if event.kind == "finish":
                    finishes += 1
                if event.kind == "delta":
                    if deltas == 0:
                        row["ttft_s"] = time.perf_counter() - start
                    deltas += 1
                    if deltas == spec["after"] and spec["action"] == "disconnect":
                        row["outcome"] = "disconnected"
                        return row
                    if deltas == spec["after"] and spec["action"] == "cancel":
                        row["cancel_ok"] = await client.cancel(rid)
                elif event.kind == "done":
                    result = event.data
                    row["finish"] = result.finish_reason
                    if result.error is not None:
                        row.update(outcome="error", error=f"stream_error:{result.error.get('code')}")
                        return row
                    if finishes != 1:
                        row.update(outcome="error", error=f"protocol: {finishes} finish chunks")
                        return row
                    row["outcome"] = "cancelled" if result.finish_reason == "cancelled" else "completed"
                    judge(result)
        row.setdefault("outcome", "error")
        row.setdefault("error", "stream ended without [DONE]")
    except AfmHTTPError as exc:
        row["status"] = exc.status
        if exc.status == 503:
            row["outcome"] = "rejected_503"
        elif exc.status == 400 and exc.error.get("code") == "max_tokens_too_small":
            row["outcome"] = "refused_budget"  # below the shortest valid output: said before generating
        else:
            row.update(outcome="error", error=f"http_{exc.status}:{exc.error.get('code')}")
    except (AfmClientError, httpx.HTTPError) as exc:
        row.update(outcome="error", error=f"{type(exc).__name__}: {str(exc)[:160]}")
    return row


def is_loopback(url: str) -> bool:
    """Whether ``url`` names this machine (hostile traffic goes nowhere else)."""
    host = httpx.URL(url).host
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Hostility:
    """The hostile part of a soak: the share of requests, their kinds, and the bounds."""

    share: float = 0.0
    kinds: tuple[str, ...] = tuple(HOSTILE_KINDS)
    stall_limit_s: float = 60.0
    huge_prompt_bytes: int = 5_000_000
    context: int | None = None  # None: found from the server's overflow error


async def soak(url: str, minutes: float, concurrency: int, seed: int, burst_every_s: float,
               burst_size: int | None, *, hostility: Hostility | None = None,
               request_timeout_s: float = 300.0, max_requests: int = 20_000,
               health_every_s: float = 5.0) -> dict[str, Any]:
    """Run the soak; the report as a dict.  Every wait is bounded: a request by
    ``request_timeout_s`` (a stalled body by the stall limit), the run by ``minutes`` and
    ``max_requests``; a server that stops answering makes errors, not a hung soak."""
    from afm_struct.client import AsyncClient

    hostility = hostility or Hostility()
    if hostility.share and not is_loopback(url):
        raise ValueError(f"hostile traffic is only sent to this machine, not to {url}")
    rows: list[dict[str, Any]] = []
    rss: dict[str, int | None] = {}
    samples: list[tuple[float, int | None, float, str | None]] = []  # (t, rss, latency, error)
    limits = httpx.Limits(max_connections=concurrency + 80, max_keepalive_connections=concurrency + 8)
    u = httpx.URL(url)
    target = Target(u.host, u.port or 80, huge_prompt_bytes=hostility.huge_prompt_bytes,
                    stall_limit_s=hostility.stall_limit_s)
    hostile_info: dict[str, Any] = {}
    # Hostile requests have their own connections, as a stranger would: a connection the server
    # drops over a hostile request is never reused for an ordinary one.
    async with httpx.AsyncClient(base_url=url, timeout=request_timeout_s, limits=limits) as http, \
            httpx.AsyncClient(base_url=url, timeout=request_timeout_s, limits=limits) as stranger:
        client = AsyncClient(http=http)
        t_zero = time.perf_counter()

        async def health() -> dict[str, Any] | None:
            # A fresh connection each time: a pooled one the server dropped is not a failed probe.
            t = time.perf_counter()
            try:
                async with httpx.AsyncClient(base_url=url, timeout=10) as probe:
                    doc = (await probe.get("/health")).json()
                rss_now = doc.get("rss_bytes")
            except (httpx.HTTPError, ValueError, AttributeError) as exc:
                samples.append((t - t_zero, None, time.perf_counter() - t, type(exc).__name__))
                return None
            samples.append((t - t_zero, rss_now, time.perf_counter() - t, None))
            return doc  # type: ignore[no-any-return]

        first = await health()
        if first is None:
            raise ConnectionError(f"no answer from {url}/health")
        rss["start"] = first.get("rss_bytes")
        capacity = int(first.get("capacity", 24))
        if hostility.share:
            target, hostile_info["target"] = await calibrate(
                stranger, target, context=hostility.context, timeout_s=request_timeout_s)
            if "control_tokens" in hostility.kinds:
                hostile_info["control_token_probe"] = await control_token_probe(stranger, request_timeout_s)
        start = time.perf_counter()
        deadline = start + minutes * 60

        async def bounded(coro: Any, row: dict[str, Any], limit: float) -> dict[str, Any]:
            t0 = time.perf_counter()
            try:
                row = await asyncio.wait_for(coro, limit)
            except TimeoutError:
                row.update({"result": "timeout"} if row["hostile"] else {"outcome": "error"},
                           error=f"timeout after {limit:.0f} s")
            row.update(t0=round(t0 - start, 3), t1=round(time.perf_counter() - start, 3))
            return row

        async def ordinary(spec: dict[str, Any]) -> dict[str, Any]:
            rid = f"soak-{uuid.uuid4().hex[:12]}"
            row = {"kind": spec["kind"], "action": spec["action"], "stream": spec["stream"],
                   "rid": rid, "hostile": False, "status": None}
            return await bounded(send(client, spec, rid), row, request_timeout_s)

        async def hostile(spec: dict[str, Any]) -> dict[str, Any]:
            rid = f"hostile-{uuid.uuid4().hex[:12]}"
            row = {"kind": spec["kind"], "variant": spec["variant"], "hostile": True, "rid": rid,
                   "stream": spec["stream"], "status": None}
            limit = request_timeout_s + (hostility.stall_limit_s if spec["transport"] == "stalled" else 0)
            return await bounded(send_hostile(stranger, spec, target, rid=rid, timeout_s=request_timeout_s),
                                 row, limit + 5)

        async def worker(n: int) -> None:
            rng = random.Random(seed * 7919 + n)
            coin = random.Random(seed * 7919 + n + 1_000_003)  # the ordinary draws stay as without
            while time.perf_counter() < deadline and len(rows) < max_requests:
                if hostility.share and coin.random() < hostility.share:
                    # Megabytes of prompt or enum are built off the loop that times the streams.
                    spec = await asyncio.to_thread(draw_hostile, coin, target, list(hostility.kinds))
                    rows.append(await hostile(spec))
                else:
                    rows.append(await ordinary(draw_request(rng)))
                await asyncio.sleep(rng.choice([0, 0, 0.05, 0.3, 1.0]))

        workers_done = asyncio.Event()

        async def bursts() -> None:
            rng = random.Random(seed - 1)
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(workers_done.wait(), burst_every_s)
                if workers_done.is_set() or time.perf_counter() >= deadline or len(rows) >= max_requests:
                    return
                size = burst_size or capacity + 8
                burst = await asyncio.gather(*(ordinary({**draw_request(rng), "action": "read"})
                                               for _ in range(size)))
                for r in burst:
                    r["burst"] = True
                rows.extend(burst)

        async def memory() -> None:
            warm_at = start + min(60.0, minutes * 30)
            while True:
                until_warm = warm_at - time.perf_counter()
                await asyncio.sleep(health_every_s if "warm" in rss else
                                    max(0.2, min(health_every_s, until_warm)))
                doc = await health()
                if "warm" not in rss and doc is not None and time.perf_counter() >= warm_at:
                    rss["warm"] = doc.get("rss_bytes")

        burst_task, memory_task = asyncio.create_task(bursts()), asyncio.create_task(memory())
        await asyncio.gather(*(worker(n) for n in range(concurrency)))
        workers_done.set()
        await burst_task  # a burst under way is counted, not dropped (each request is bounded)
        wall = time.perf_counter() - start
        memory_task.cancel()
        await asyncio.gather(memory_task, return_exceptions=True)
        # Cancelled and disconnected rows free their slots, and the idle server gives its free
        # heap back (after 2 s idle: SchedulerLimits.idle_release_s), so "end" is the idle size.
        await asyncio.sleep(5.0)
        last = await health() or {}
        rss["end"] = last.get("rss_bytes")
    return summarize(rows, url=url, minutes=minutes, concurrency=concurrency, seed=seed, wall=wall,
                     rss=rss, samples=[(round(t - (start - t_zero), 2), *rest) for t, *rest in samples],
                     in_flight_after=last.get("requests_in_flight"), hostility=hostility,
                     hostile_info=hostile_info,
                     limits={"request_timeout_s": request_timeout_s, "max_requests": max_requests,
                             "stall_limit_s": hostility.stall_limit_s})


def run(args: argparse.Namespace) -> int:
    """Run, write JSON, print the tables; exit 1 on errors, invalid outputs or a failed verdict."""
    logging.getLogger("httpx").setLevel(logging.WARNING)
    kinds = tuple(k.strip() for k in args.hostile_kinds.split(",") if k.strip()) if args.hostile_kinds \
        else tuple(HOSTILE_KINDS)
    unknown = sorted(set(kinds) - set(HOSTILE_KINDS))
    if unknown or not 0 <= args.hostile <= 1:
        print(f"afm-struct: error: --hostile must be in [0, 1] and --hostile-kinds among "
              f"{', '.join(HOSTILE_KINDS)} (unknown: {', '.join(unknown) or '-'})", file=sys.stderr)
        return 2
    hostility = Hostility(args.hostile, kinds, args.stall_limit, args.huge_prompt_bytes, args.context)
    print(f"[bench soak] {args.minutes} min against {args.url}, concurrency {args.concurrency}, "
          f"hostile share {args.hostile} ...", file=sys.stderr)
    try:
        report = asyncio.run(soak(args.url, args.minutes, args.concurrency, args.seed, args.burst_every,
                                  args.burst_size, hostility=hostility,
                                  request_timeout_s=args.request_timeout, max_requests=args.max_requests))
    except (ValueError, ConnectionError) as exc:
        print(f"afm-struct: error: {exc}", file=sys.stderr)
        return 2
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(markdown(report))
    failed = [k for k, v in report["verdict"].items() if v is False]
    return 0 if report["errors"] == 0 and report["invalid"] == 0 and not failed else 1


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``bench soak``."""
    p = sub.add_parser("soak", help="random mixed traffic for N minutes, optionally with a hostile "
                                    "share: harm, 5xx, invalid outputs, memory")
    p.add_argument("--url", default="http://127.0.0.1:9999")
    p.add_argument("--minutes", type=float, default=5.0)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--burst-every", type=float, default=60.0, help="seconds between bursts")
    p.add_argument("--burst-size", type=int, default=None, help="default: the server's capacity + 8")
    p.add_argument("--hostile", type=float, default=0.0, metavar="SHARE",
                   help="fraction (0..1) of the workers' requests that are hostile (loopback servers only)")
    p.add_argument("--hostile-kinds", default="", metavar="K1,K2",
                   help=f"hostile kinds to draw from (default all: {', '.join(HOSTILE_KINDS)})")
    p.add_argument("--stall-limit", type=float, default=60.0, metavar="S",
                   help="seconds a stalled body waits for the server's answer before closing "
                        "(set it above the server's --body-timeout)")
    p.add_argument("--huge-prompt-bytes", type=int, default=5_000_000,
                   help="size of the huge-prompt kind (also used once to find the context)")
    p.add_argument("--context", type=int, default=None,
                   help="the model's context in tokens (default: read from the server's overflow error)")
    p.add_argument("--request-timeout", type=float, default=300.0, metavar="S",
                   help="longest wait for one request (then it counts as a timeout)")
    p.add_argument("--max-requests", type=int, default=20_000, help="stop after this many requests")
    p.add_argument("--out", required=True)
    p.set_defaults(func=run)
