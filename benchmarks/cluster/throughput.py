"""Throughput of N scripted replicas behind HAProxy versus one, through the balancer.

Each configuration is a real ``afm-struct cluster`` (replicas and HAProxy as processes) serving
``--model scripted:RATE``: every batch step takes 1/RATE s, so a replica's ceiling is
max_active x RATE tokens/s whatever the CPU, and the run measures the serving layers (HTTP,
scheduler, SSE, balancer).  The same closed-loop load (CONCURRENCY workers, each streaming
requests of TOKENS tokens back to back) is offered to both; throughput is the completion
tokens (usage chunks) of the requests that finished inside the SECONDS window, per second
(requests still running at its end are not counted, in either run).  Writes a JSON with
both runs and the ratio::

    .venv/bin/python benchmarks/cluster/throughput.py --out benchmarks/cluster/throughput.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from afm_struct.cli.cluster_ports import free_port
from afm_struct.cli.cluster_supervisor import Cluster


async def _worker(client: httpx.AsyncClient, url: str, tokens: int, until: float,
                  totals: dict[str, int]) -> None:
    """Stream requests back to back until ``until``; count those that end before it."""
    body = {"messages": [{"role": "user", "content": "count"}], "stream": True, "max_tokens": tokens,
            "stream_options": {"include_usage": True}}
    while time.perf_counter() < until:
        async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                totals["errors"] += 1
                await response.aread()
                await asyncio.sleep(0.05)
                continue
            done, used = False, 0
            async for line in response.aiter_lines():
                if line.startswith("data: {") and '"usage"' in line and '"choices":[]' in line:
                    used = json.loads(line[6:])["usage"]["completion_tokens"]
                done = done or line == "data: [DONE]"
            if not done:
                totals["errors"] += 1
            elif time.perf_counter() <= until:
                totals["requests"] += 1
                totals["tokens"] += used


async def _drive(url: str, concurrency: int, tokens: int, seconds: float) -> dict[str, Any]:
    totals = {"tokens": 0, "requests": 0, "errors": 0}
    limits = httpx.Limits(max_connections=concurrency + 10, max_keepalive_connections=concurrency + 10)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        started = time.perf_counter()
        await asyncio.gather(*(_worker(client, url, tokens, started + seconds, totals)
                               for _ in range(concurrency)))
    return {**totals, "seconds": seconds, "tokens_per_s": round(totals["tokens"] / seconds, 1)}


def measure(replicas: int, args: argparse.Namespace) -> dict[str, Any]:
    """Start a cluster of ``replicas``, warm it, drive it, stop it."""
    cluster = Cluster(replicas, free_port(), ["--model", f"scripted:{args.rate:g}", "--log-level", "warning",
                                              "--max-active", str(args.max_active),
                                              "--max-queue", str(args.concurrency)],
                      log=lambda _line: None)
    cluster.start()
    try:
        asyncio.run(_drive(cluster.url, args.concurrency, args.tokens, 2.0))  # warm-up
        result = asyncio.run(_drive(cluster.url, args.concurrency, args.tokens, args.seconds))
    finally:
        cluster.stop()
    print(f"{replicas} replica(s): {result['tokens_per_s']} tokens/s, {result['requests']} requests, "
          f"{result['errors']} errors", file=sys.stderr)
    return {"replicas": replicas, **result}


def main() -> None:
    """Measure 1 and N replicas and write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--rate", type=float, default=10.0, help="scripted tokens/s per sequence")
    p.add_argument("--max-active", type=int, default=8)
    p.add_argument("--concurrency", type=int, default=24, help="closed-loop workers (both runs)")
    p.add_argument("--tokens", type=int, default=30, help="max_tokens per request")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--out", default="benchmarks/cluster/throughput.json")
    args = p.parse_args()
    one = measure(1, args)
    many = measure(args.replicas, args)
    ratio = round(many["tokens_per_s"] / one["tokens_per_s"], 2)
    report = {"command": " ".join([".venv/bin/python", *sys.argv]), "ratio": ratio,
              "settings": {k: v for k, v in vars(args).items() if k != "out"},
              "runs": [one, many], "machine": {"cpus": os.cpu_count(), "platform": platform.platform()}}
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"{args.replicas} replicas / 1 = {ratio}x ({args.out})", file=sys.stderr)


if __name__ == "__main__":
    main()
