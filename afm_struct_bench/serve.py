"""``afm-struct bench serve``: load against a running server, every output validated.

For each concurrency level, ``--requests`` requests (a rotating mix of free, json_schema and
strict-tool requests, each json_schema with its own schema) are sent by that many concurrent
workers over real HTTP with the contract-following client.  Measured: aggregate output
tokens/s, TTFT and latency percentiles, HTTP errors, 503 rejections (before streaming),
downgrades, invalid outputs, mixed streams, cancellations honoured, /health during load, and
the server's CPU seconds per generated token (from its ``/metrics``).  ``--mixes`` runs several
mixes back to back at each level (e.g. ``free`` and ``json_schema``) and reports their ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import jsonschema

from .environment import environment
from .server_cost import comparison_markdown, cost_fields, mix_comparison, mix_label, read_cpu_seconds

SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 40},
                                      "age": {"type": "integer"},
                                      "city": {"type": "string", "maxLength": 40}},
     "required": ["name", "age", "city"], "additionalProperties": False},
    {"type": "object", "properties": {"product": {"type": "string", "maxLength": 40},
                                      "price": {"type": "number"}, "in_stock": {"type": "boolean"}},
     "required": ["product", "price", "in_stock"], "additionalProperties": False},
    {"type": "object", "properties": {"title": {"type": "string", "maxLength": 60},
                                      "tags": {"type": "array", "items": {"type": "string", "maxLength": 20},
                                               "maxItems": 3}},
     "required": ["title", "tags"], "additionalProperties": False},
]
PROMPTS = ["Describe Ada Lovelace, 36, from London.", "A blue mug costs 12.5 dollars and is in stock.",
           "Write a title and tags for a post about sourdough bread."]
TOOL = {"type": "function", "function": {
    "name": "get_weather", "strict": True, "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                                    "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}


def percentiles(values: list[float]) -> dict[str, float | None]:
    """p50/p95/p99 (nearest rank); None when there are no values."""
    if not values:
        return {"p50": None, "p95": None, "p99": None}
    s = sorted(values)

    def rank(q: float) -> float:
        return s[min(len(s) - 1, max(0, round(q * len(s)) - 1))]

    return {"p50": rank(0.50), "p95": rank(0.95), "p99": rank(0.99)}


# ``--prompts equal``: one template per schema with a single digit, so every request of a kind
# has the same token length (the shape that once crashed a burst after a lone request).
EQUAL_PROMPTS = ["Describe person number {d}: a name, an age and a city.",
                 "Describe product number {d}: a name, a price and whether it is in stock.",
                 "Write a title and tags for blog post number {d} about bread."]
# ``--prompts random``: a seeded run of these words before the task, 0-240 of them.
FILLER = ("notes from the archive say the record was kept in a ledger with other entries of "
          "the same year and several later corrections").split()


def prompt_text(i: int, k: int, prompts: str, seed: int) -> str:
    """The user message of request ``i`` (schema ``k``) in prompt mode ``prompts``."""
    if prompts == "equal":
        return EQUAL_PROMPTS[k].format(d=i % 9 + 1)
    if prompts == "random":
        rng = random.Random(seed * 1_000_003 + i)
        words = [rng.choice(FILLER) for _ in range(rng.randint(0, 240))]
        context = f"Context: {' '.join(words)}.\n\n" if words else ""
        return context + PROMPTS[k]
    return PROMPTS[k]


def make_request(i: int, kinds: list[str], max_tokens: int, seed: int,
                 prompts: str = "fixed") -> dict[str, Any]:
    """The i-th request of the mix: its kind, body parameters and what validates it."""
    kind = kinds[i % len(kinds)]
    k = i % len(SCHEMAS)
    params: dict[str, Any] = {"max_tokens": max_tokens, "temperature": 0.0, "seed": seed + i,
                              "stream_options": {"include_usage": True}}
    messages = [{"role": "user", "content": prompt_text(i, k, prompts, seed)}]
    if kind == "json_schema":
        params["response_format"] = {"type": "json_schema", "json_schema": {
            "name": f"s{k}", "schema": SCHEMAS[k], "strict": True}}
    elif kind == "tool":
        messages = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]
        params.update(tools=[TOOL], tool_choice="required", parallel_tool_calls=False)
    return {"kind": kind, "schema_index": k, "messages": messages, "params": params}


def validate(spec: dict[str, Any], result: Any) -> str | None:
    """Why the output is invalid for its own request (None when it is valid or was cut)."""
    if result.finish_reason in ("length", "cancelled"):
        return None
    try:
        if spec["kind"] == "json_schema":
            jsonschema.validate(json.loads(result.content), SCHEMAS[spec["schema_index"]])
        elif spec["kind"] == "tool":
            if len(result.tool_calls) != 1 or result.tool_calls[0].name != "get_weather":
                return f"expected one get_weather call, got {[c.name for c in result.tool_calls]}"
            jsonschema.validate(json.loads(result.tool_calls[0].arguments),
                                TOOL["function"]["parameters"])
        elif not (result.content or result.tool_calls):
            return "empty output"
    except (ValueError, jsonschema.ValidationError) as exc:
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    return None


async def one_light(http: httpx.AsyncClient, spec: dict[str, Any]) -> dict[str, Any]:
    """Send one streamed request with the light client (:mod:`.light_client`) and time it."""
    from afm_struct.client import AfmHTTPError

    from .light_client import light_stream

    rid = f"bench-{uuid.uuid4().hex[:12]}"
    start = time.perf_counter()
    row: dict[str, Any] = {"kind": spec["kind"], "request_id": rid}
    try:
        result = await light_stream(http, spec["messages"], request_id=rid, **spec["params"])
        row.update(status=200, finish_reason=result.finish_reason,
                   tokens=(result.usage or {}).get("completion_tokens", 0),
                   downgraded=result.headers.get("x-grammar-constraints") == "downgraded",
                   error=result.error, invalid=validate(spec, result))
        row["ttft_s"] = result.first_delta_s
    except AfmHTTPError as exc:
        row.update(status=exc.status, error=str(exc), tokens=0, ttft_s=None)
    except (httpx.HTTPError, ValueError) as exc:
        row.update(status=-1, error=f"{type(exc).__name__}: {exc}", tokens=0, ttft_s=None)
    row["latency_s"] = time.perf_counter() - start
    return row


async def one(client: Any, spec: dict[str, Any], cancel_after: int | None) -> dict[str, Any]:
    """Send one streamed request; time it; optionally cancel it after some deltas."""
    from afm_struct.client import AfmClientError, AfmHTTPError

    rid = f"bench-{uuid.uuid4().hex[:12]}"
    start = time.perf_counter()
    first = None
    deltas = 0
    row: dict[str, Any] = {"kind": spec["kind"], "request_id": rid}
    try:
        async for event in client.stream(spec["messages"], request_id=rid, **spec["params"]):
            if event.kind == "delta" and first is None:
                first = time.perf_counter() - start
            if event.kind == "delta":
                deltas += 1
                if cancel_after is not None and deltas == cancel_after:
                    row["cancel_sent"] = await client.cancel(rid)
            if event.kind == "done":
                result = event.data
                row.update(status=200, finish_reason=result.finish_reason,
                           tokens=(result.usage or {}).get("completion_tokens", 0),
                           downgraded=result.headers.get("x-grammar-constraints") == "downgraded",
                           error=result.error, invalid=validate(spec, result))
    except AfmHTTPError as exc:
        row.update(status=exc.status, error=str(exc), tokens=0)
    except (AfmClientError, httpx.HTTPError) as exc:
        row.update(status=-1, error=f"{type(exc).__name__}: {exc}", tokens=0)
    row["ttft_s"] = first
    row["latency_s"] = time.perf_counter() - start
    return row


async def run_level(url: str, concurrency: int, n: int, kinds: list[str], max_tokens: int, seed: int,
                    cancel_every: int, prompts: str = "fixed", light: bool = False) -> dict[str, Any]:
    """One concurrency level (``light``: free and json_schema requests that are not cancelled
    go through the light client)."""
    from afm_struct.client import AsyncClient

    specs = [make_request(i, kinds, max_tokens, seed, prompts) for i in range(n)]
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)
    rows: list[dict[str, Any]] = []
    health_failures = 0
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as http:
        client = AsyncClient(http=http)

        async def worker() -> None:
            while True:
                try:
                    i = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                cancel_after = 3 if cancel_every and i % cancel_every == cancel_every - 1 else None
                if light and cancel_after is None and specs[i]["kind"] != "tool":
                    rows.append(await one_light(http, specs[i]))
                else:
                    rows.append(await one(client, specs[i], cancel_after))

        async def health() -> None:
            nonlocal health_failures
            while True:
                try:
                    r = await http.get("/health", timeout=5)
                    health_failures += r.status_code != 200
                except httpx.HTTPError:
                    health_failures += 1
                await asyncio.sleep(0.5)

        cpu_before = await read_cpu_seconds(http)
        start = time.perf_counter()
        probe = asyncio.create_task(health())
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - start
        probe.cancel()
        cpu_after = await read_cpu_seconds(http)
    ok = [r for r in rows if r.get("status") == 200 and not r.get("error")]
    cancels = [r for r in rows if "cancel_sent" in r]
    tokens = sum(r["tokens"] for r in rows)
    return {
        "concurrency": concurrency, "requests": n, "wall_s": wall, "mix": mix_label(kinds),
        "tokens": tokens, "throughput_tok_s": tokens / wall,
        **cost_fields(cpu_before, cpu_after, tokens),
        "ttft_ms": {k: v * 1000 if v is not None else None
                    for k, v in percentiles([r["ttft_s"] for r in ok if r["ttft_s"] is not None]).items()},
        "latency_ms": {k: v * 1000 if v is not None else None
                       for k, v in percentiles([r["latency_s"] for r in ok]).items()},
        "completed": len(ok), "rejected_503": sum(r.get("status") == 503 for r in rows),
        "errors": sum(r.get("status") != 503 and (r.get("status") != 200 or bool(r.get("error")))
                      for r in rows),
        "invalid": sum(bool(r.get("invalid")) for r in ok),
        "downgrades": sum(bool(r.get("downgraded")) for r in ok),
        "cancellations": {"requested": len(cancels),
                          "honored": sum(r.get("finish_reason") == "cancelled" for r in cancels)},
        "health_failures": health_failures,
        "by_kind": {k: sum(r["kind"] == k for r in ok) for k in kinds},
        "failures": [{k: r.get(k) for k in ("kind", "status", "error", "invalid")}
                     for r in rows if r.get("status") != 503 and (r.get("error") or r.get("invalid"))][:20],
    }


def markdown(runs: list[dict[str, Any]]) -> str:
    """The summary table."""
    lines = ["| mix | concurrency | requests | tok/s | server CPU µs/token | TTFT p50/p95 ms | "
             "latency p50/p95 ms | completed | 503 | errors | invalid | downgrades | cancels honoured |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def f(x: float | None) -> str:
        return "-" if x is None else f"{x:.0f}"

    for r in runs:
        c = r["cancellations"]
        lines.append(
            f"| {r.get('mix', '-')} | {r['concurrency']} | {r['requests']} | {r['throughput_tok_s']:.1f} | "
            f"{f(r.get('server_cpu_us_per_token'))} | "
            f"{f(r['ttft_ms']['p50'])}/{f(r['ttft_ms']['p95'])} | "
            f"{f(r['latency_ms']['p50'])}/{f(r['latency_ms']['p95'])} | {r['completed']} | "
            f"{r['rejected_503']} | {r['errors']} | {r['invalid']} | {r['downgrades']} | "
            f"{c['honored']}/{c['requested']} |")
    return "\n".join(lines)


def scaling_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per round, each level's throughput and TTFT p95 relative to concurrency 1 of the same
    round; and the median of those ratios over rounds.  Empty without a concurrency-1 level."""
    by_round: dict[int, dict[int, dict[str, Any]]] = {}
    for r in runs:
        by_round.setdefault(r.get("round", 1), {})[r["concurrency"]] = r
    rounds = []
    for rnd in sorted(by_round):
        levels = by_round[rnd]
        base = levels.get(1)
        if base is None or not base["throughput_tok_s"]:
            continue
        base_ttft = base["ttft_ms"]["p95"]
        rounds.append({str(c): {
            "throughput": r["throughput_tok_s"] / base["throughput_tok_s"],
            "ttft_p95": (r["ttft_ms"]["p95"] / base_ttft
                         if base_ttft and r["ttft_ms"]["p95"] is not None else None)}
            for c, r in sorted(levels.items())})
    if not rounds:
        return {}
    median: dict[str, dict[str, float | None]] = {}
    for level in rounds[0]:
        for key in ("throughput", "ttft_p95"):
            values = sorted(x[level][key] for x in rounds
                            if level in x and x[level][key] is not None)
            median.setdefault(level, {})[key] = statistics.median(values) if values else None
    return {"by_round": rounds, "median": median}


def run(args: argparse.Namespace) -> int:
    """All levels (``--rounds`` times, round-robin), then JSON + Markdown."""
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    mixes = [[k.strip() for k in mix.split(",") if k.strip()]
             for mix in (getattr(args, "mixes", None) or args.mix).split(";") if mix.strip()]
    levels = [int(c) for c in str(args.concurrency).split(",")]
    runs = []
    # Rounds go through every level in turn, so a machine whose speed drifts over minutes
    # (shared VMs) biases no level against another; ratios are taken within a round.
    for rnd in range(1, args.rounds + 1):
        for c in levels:
            n = args.requests or c * 4
            for kinds in mixes:  # back to back, so the mixes' ratios share the machine's state
                print(f"[bench serve] round {rnd}/{args.rounds}, concurrency {c}, mix "
                      f"{mix_label(kinds)}: {n} requests ...", file=sys.stderr)
                level = asyncio.run(run_level(args.url, c, n, kinds, args.max_tokens, args.seed,
                                              args.cancel_every, args.prompts,
                                              getattr(args, "client", "full") == "light"))
                level["round"] = rnd
                runs.append(level)
                print(markdown(runs[-1:]).splitlines()[-1], file=sys.stderr)
    result: dict[str, Any] = {"url": args.url, "mix": mixes[0], "mixes": [mix_label(m) for m in mixes],
                              "prompts": args.prompts, "client": getattr(args, "client", "full"),
                              "max_tokens": args.max_tokens,
                              "seed": args.seed, "rounds": args.rounds, "runs": runs,
                              "environment": environment()}
    summary = scaling_summary([r for r in runs if r["mix"] == mix_label(mixes[0])])
    comparison = mix_comparison(runs)
    if comparison:
        result["mix_comparison"] = comparison
    if summary:
        result["scaling"] = {c: v["throughput"] for c, v in summary["by_round"][0].items()}
        result["scaling_by_round"] = summary["by_round"]
        result["scaling_median"] = summary["median"]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(markdown(runs))
    if comparison:
        print("\n" + comparison_markdown(comparison))
    if summary and args.rounds > 1:
        print("\n| concurrency | throughput vs 1, per round | median | TTFT p95 vs 1, per round | median |")
        print("|---|---|---|---|---|")
        for c, med in summary["median"].items():
            per = [x[c] for x in summary["by_round"] if c in x]
            thr = " / ".join(f"{x['throughput']:.2f}x" for x in per)
            ttft = " / ".join("-" if x["ttft_p95"] is None else f"{x['ttft_p95']:.2f}x" for x in per)
            m_ttft = "-" if med["ttft_p95"] is None else f"{med['ttft_p95']:.2f}x"
            print(f"| {c} | {thr} | {med['throughput']:.2f}x | {ttft} | {m_ttft} |")
    return 0 if all(r["errors"] == 0 and r["invalid"] == 0 for r in runs) else 1


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``bench serve``."""
    p = sub.add_parser("serve", help="load-test a running server (throughput, TTFT, latency)")
    p.add_argument("--url", default="http://127.0.0.1:9999")
    p.add_argument("--concurrency", default="1,2,4,8", help="one level or a comma-separated list")
    p.add_argument("--requests", type=int, default=None, help="requests per level (default 4 x C)")
    p.add_argument("--mix", default="free,json_schema,tool", help="request kinds, rotated")
    p.add_argument("--mixes", default=None,
                   help="several mixes run back to back at each level, separated by ';' (e.g. "
                        "'free;json_schema'): each reported alone, then as ratios to the first")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cancel-every", type=int, default=0, help="cancel every k-th request mid-stream")
    p.add_argument("--rounds", type=int, default=1,
                   help="run the levels this many times, round-robin (ratios per round, median)")
    p.add_argument("--prompts", choices=("fixed", "equal", "random"), default="fixed",
                   help="fixed: one prompt per schema; equal: same token length within a kind "
                        "(digit-numbered); random: a seeded 0-240-word context before the task")
    p.add_argument("--client", choices=("full", "light"), default="full",
                   help="full: the contract-following client; light: raw streaming, one json.loads "
                        "per chunk (free and json_schema; tool requests and cancels keep the full one)")
    p.add_argument("--out", required=True)
    p.set_defaults(func=run)
