"""``afm-struct bench soak``: random mixed traffic against a running server for N minutes.

The load benchmark (``bench serve``) sends the shapes it was written for; a soak sends shapes
nobody rehearsed.  Each of ``--concurrency`` workers loops until the deadline, drawing every
request at random from a seeded generator: kind (json_schema, json_object, strict tool, free),
streamed or not, max_tokens, a context of random length before the task (equal lengths,
repeats and long prompts all occur), and what the client does: read to the end, cancel by
request ID after a few deltas, or disconnect mid-stream.  Every ``--burst-every`` seconds a
burst larger than the server's capacity arrives at once (503 before streaming is expected).

Counted: requests by outcome, errors by kind (anything but 200 / 503, a stream that breaks the
contract or reports an error), invalid outputs (a finished constrained output that does not
validate; a constrained output cut by max_tokens that does not parse is counted apart),
TTFT p50/p99, and the server's resident memory (from ``/health``) at the start, after the
first minute (warm), and at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import random
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import jsonschema

from .environment import environment
from .serve import FILLER, PROMPTS, SCHEMAS, TOOL, percentiles

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


def check_output(spec: dict[str, Any], result: Any) -> tuple[str | None, bool]:
    """(why a finished output is invalid, or None; whether a cut constrained output fails to parse)."""
    kind = spec["kind"]
    cut = result.finish_reason == "length"
    if result.finish_reason == "cancelled" or kind == "free":
        return None, False
    if spec["params"].get("stop") and result.finish_reason == "stop" and kind != "tool":
        return None, False  # a stop string may end the JSON early: the client asked for that
    try:
        if kind == "tool":
            if not result.tool_calls:
                return (None, True) if cut else ("no tool call", False)
            value = json.loads(result.tool_calls[0].arguments)
            jsonschema.validate(value, TOOL["function"]["parameters"])
        else:
            value = json.loads(result.content)
            if kind == "json_schema":
                jsonschema.validate(value, SCHEMAS[spec["schema_index"]])
            elif not isinstance(value, dict):
                raise ValueError(f"expected an object, got {type(value).__name__}")
    except (ValueError, jsonschema.ValidationError) as exc:
        if cut:
            return None, True
        return f"{kind}: {type(exc).__name__}: {str(exc)[:160]}", False
    return None, False


async def send(client: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """Send one request and do with it what ``spec["action"]`` says; one row of results."""
    from ..client import AfmClientError, AfmHTTPError

    rid = f"soak-{uuid.uuid4().hex[:12]}"
    row: dict[str, Any] = {"kind": spec["kind"], "action": spec["action"], "stream": spec["stream"]}
    start = time.perf_counter()
    try:
        if not spec["stream"]:
            result = await client.chat(spec["messages"], stream=False, request_id=rid, **spec["params"])
            row.update(outcome="completed", finish=result.finish_reason)
            row["invalid"], row["cut_unparseable"] = check_output(spec, result)
            return row
        deltas = finishes = 0
        async with contextlib.aclosing(client.stream(spec["messages"], request_id=rid,
                                                     **spec["params"])) as events:
            async for event in events:
                # The contract, checked here because the client assembler is lenient: one
                # finish chunk, nothing after it but usage/profile, then [DONE].
                if event.kind in ("delta", "finish") and finishes:
                    row.update(outcome="error", error=f"protocol: {event.kind} after the finish chunk")
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
                    row["invalid"], row["cut_unparseable"] = check_output(spec, result)
        row.setdefault("outcome", "error")
        row.setdefault("error", "stream ended without [DONE]")
    except AfmHTTPError as exc:
        if exc.status == 503:
            row["outcome"] = "rejected_503"
        else:
            row.update(outcome="error", error=f"http_{exc.status}:{exc.error.get('code')}")
    except (AfmClientError, httpx.HTTPError) as exc:
        row.update(outcome="error", error=f"{type(exc).__name__}: {str(exc)[:160]}")
    return row


async def soak(url: str, minutes: float, concurrency: int, seed: int, burst_every_s: float,
               burst_size: int | None) -> dict[str, Any]:
    """Run the soak; the report as a dict."""
    from ..client import AsyncClient

    deadline = time.perf_counter() + minutes * 60
    rows: list[dict[str, Any]] = []
    rss: dict[str, int | None] = {}
    limits = httpx.Limits(max_connections=concurrency + 80, max_keepalive_connections=concurrency + 8)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as http:
        client = AsyncClient(http=http)

        async def health() -> dict[str, Any]:
            return (await http.get("/health", timeout=10)).json()

        first = await health()
        rss["start"] = first.get("rss_bytes")
        capacity = int(first.get("capacity", 24))

        async def worker(n: int) -> None:
            rng = random.Random(seed * 7919 + n)
            while time.perf_counter() < deadline:
                rows.append(await send(client, draw_request(rng)))
                await asyncio.sleep(rng.choice([0, 0, 0.05, 0.3, 1.0]))

        async def bursts() -> None:
            rng = random.Random(seed - 1)
            while True:
                await asyncio.sleep(burst_every_s)
                if time.perf_counter() >= deadline:
                    return
                size = burst_size or capacity + 8
                burst = await asyncio.gather(*(send(client, {**draw_request(rng), "action": "read"})
                                               for _ in range(size)))
                for r in burst:
                    r["burst"] = True
                rows.extend(burst)

        async def memory() -> None:
            await asyncio.sleep(min(60.0, minutes * 30))
            rss["warm"] = (await health()).get("rss_bytes")

        tasks = [asyncio.create_task(t) for t in (bursts(), memory())]
        start = time.perf_counter()
        await asyncio.gather(*(worker(n) for n in range(concurrency)))
        wall = time.perf_counter() - start
        for t in tasks:
            t.cancel()
        await asyncio.sleep(1.0)  # cancelled and disconnected rows free their slots
        last = await health()
        rss["end"] = last.get("rss_bytes")
    outcomes = Counter(r["outcome"] for r in rows)
    errors = Counter(r["error"] for r in rows if r["outcome"] == "error")
    invalid = [r["invalid"] for r in rows if r.get("invalid")]
    ttft = percentiles([r["ttft_s"] for r in rows if r.get("ttft_s") is not None])
    warm = rss.get("warm") or rss.get("start")
    growth = (rss["end"] / warm - 1) if warm and rss.get("end") else None
    cancels = [r for r in rows if r["action"] == "cancel" and "cancel_ok" in r]
    return {
        "url": url, "minutes": minutes, "concurrency": concurrency, "seed": seed, "wall_s": wall,
        "requests": len(rows), "outcomes": dict(outcomes), "errors_by_kind": dict(errors),
        "errors": sum(errors.values()), "invalid": len(invalid), "invalid_examples": invalid[:10],
        "cut_unparseable": sum(bool(r.get("cut_unparseable")) for r in rows),
        "by_kind": dict(Counter(r["kind"] for r in rows)),
        # A cancel that lands while the stream's last step runs may lose the race: the server
        # acknowledged it, but the stream had already finished its own way.
        "cancels": {"sent": len(cancels),
                    "honoured": sum(r.get("finish") == "cancelled" for r in cancels),
                    "raced_finish": sum(r.get("finish") not in (None, "cancelled") for r in cancels),
                    "acknowledged": sum(bool(r["cancel_ok"]) for r in cancels)},
        "ttft_ms": {k: None if v is None else v * 1000 for k, v in ttft.items()},
        "rss_bytes": rss, "rss_growth_from_warm": growth,
        "in_flight_after": last.get("requests_in_flight"),
        "environment": environment(),
    }


def markdown(report: dict[str, Any]) -> str:
    """The summary table."""
    def mb(x: int | None) -> str:
        return "-" if x is None else f"{x / 2**20:.0f} MB"

    rss, t = report["rss_bytes"], report["ttft_ms"]
    growth = report["rss_growth_from_warm"]
    rows = [
        ("duration", f"{report['minutes']} min, concurrency {report['concurrency']}, seed {report['seed']}"),
        ("requests", str(report["requests"])),
        ("outcomes", ", ".join(f"{k} {v}" for k, v in sorted(report["outcomes"].items()))),
        ("errors (not 503)", f"{report['errors']} {report['errors_by_kind'] or ''}".strip()),
        ("invalid outputs", str(report["invalid"])),
        ("constrained outputs cut by max_tokens that do not parse", str(report["cut_unparseable"])),
        ("cancels honoured (else finished first)",
         f"{report['cancels']['honoured']}/{report['cancels']['sent']} "
         f"({report['cancels']['raced_finish']} finished first)"),
        ("TTFT p50 / p99", "-" if t["p50"] is None else f"{t['p50']:.0f} / {t['p99']:.0f} ms"),
        ("RSS start / warm / end", f"{mb(rss.get('start'))} / {mb(rss.get('warm'))} / {mb(rss.get('end'))}"),
        ("RSS growth from warm", "-" if growth is None else f"{growth * 100:+.1f}%"),
        ("in flight after", str(report["in_flight_after"])),
    ]
    return "\n".join(["| measure | value |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)])


def run(args: argparse.Namespace) -> int:
    """Run, write JSON, print the table; exit 1 on errors or invalid outputs."""
    logging.getLogger("httpx").setLevel(logging.WARNING)
    print(f"[bench soak] {args.minutes} min against {args.url}, concurrency {args.concurrency} ...",
          file=sys.stderr)
    report = asyncio.run(soak(args.url, args.minutes, args.concurrency, args.seed,
                              args.burst_every, args.burst_size))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(markdown(report))
    return 0 if report["errors"] == 0 and report["invalid"] == 0 else 1


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``bench soak``."""
    p = sub.add_parser("soak", help="random mixed traffic for N minutes: errors, invalid outputs, memory")
    p.add_argument("--url", default="http://127.0.0.1:9999")
    p.add_argument("--minutes", type=float, default=5.0)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--burst-every", type=float, default=60.0, help="seconds between bursts")
    p.add_argument("--burst-size", type=int, default=None, help="default: the server's capacity + 8")
    p.add_argument("--out", required=True)
    p.set_defaults(func=run)
