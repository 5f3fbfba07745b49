"""A batch of extraction lines through ``/v1/batches`` versus the same lines from concurrent
clients, and live TTFT while a batch runs versus on an idle server.

The server runs in this process (``server.live.start_server``) on the scripted model over the
embedded tokenizer, answering a person's JSON under a ``json_schema`` format; every forward
pass (one token for every running row) takes ``1/RATE`` s of simulated device time, spent
asynchronously like a real pass, so the run measures the serving layers: the batch runner
versus HTTP per request, and the runner's yielding to live traffic.  Each run gets a fresh
server and SQLite store.  Runs:

1. ``batch``: LINES lines uploaded, one batch created, the time until it is ``completed``
   (``--batch-lines`` = ``--max-active``, so an idle server gives the batch every row);
2. ``clients``: the same LINES requests from CLIENTS concurrent clients (httpx, non-streaming);
3. ``ttft``: PROBES streamed chat requests one after another, time to the first content
   chunk, on an idle server and while a batch of the same lines runs (default
   ``--batch-lines``, 4 of 8 rows), in alternating blocks of ``--block`` probes on the one
   server (idle, then a batch created and the probes sent while it runs, then cancelled, ...):
   on a shared machine whose load drifts, each idle block is measured beside a busy one.

    .venv/bin/python benchmarks/batch/throughput.py --out benchmarks/batch/throughput.json
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import openai

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from afm_struct.models import load_tokenizer
from afm_struct.store import open_store
from afm_struct.testing import Script, scripted_loaded_model
from server.live import LiveServer, start_server
from server.settings import ServerSettings

ANSWER = '{"name": "Ada Lovelace", "age": 36, "city": "London"}'
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                           "city": {"type": "string"}},
          "required": ["name", "age", "city"], "additionalProperties": False}


def bodies(lines: int) -> list[dict[str, Any]]:
    """The extraction requests: one document each, the same schema."""
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}}
    return [{"messages": [{"role": "user", "content": f"Extract the person from document {i}: "
                                                      "Ada Lovelace, 36, lived in London."}],
             "max_tokens": 40, "response_format": fmt} for i in range(lines)]


def serve(tokenizer: Any, rate: float, store_dir: str, **settings: Any) -> LiveServer:
    loaded = scripted_loaded_model(tokenizer, Script(ANSWER, forward_s=1.0 / rate))
    return start_server(loaded, ServerSettings(**settings),
                        response_store=open_store(Path(store_dir) / f"store-{time.monotonic_ns()}.sqlite3"))


def start_batch(live: LiveServer, requests: list[dict[str, Any]]) -> tuple[openai.OpenAI, str]:
    client = openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", max_retries=0)
    text = "".join(json.dumps({"custom_id": f"doc-{i}", "method": "POST", "url": "/v1/chat/completions",
                               "body": body}) + "\n" for i, body in enumerate(requests))
    file_id = client.files.create(file=("in.jsonl", io.BytesIO(text.encode())), purpose="batch").id
    batch = client.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions",
                                  completion_window="24h")
    return client, batch.id


def wait_batch(client: openai.OpenAI, batch_id: str) -> Any:
    while (batch := client.batches.retrieve(batch_id)).status not in ("completed", "failed", "cancelled"):
        time.sleep(0.1)
    return batch


def run_batch(live: LiveServer, requests: list[dict[str, Any]]) -> dict[str, Any]:
    started = time.perf_counter()
    client, batch_id = start_batch(live, requests)
    batch = wait_batch(client, batch_id)
    seconds = time.perf_counter() - started
    valid = sum(1 for text in client.files.content(batch.output_file_id).text.splitlines()
                if set(json.loads(json.loads(text)["response"]["body"]["choices"][0]["message"]["content"]))
                == set(SCHEMA["properties"]))
    return {"seconds": round(seconds, 2), "lines_per_s": round(len(requests) / seconds, 2),
            "completed": batch.request_counts.completed, "valid": valid}


async def run_clients(url: str, requests: list[dict[str, Any]], clients: int) -> dict[str, Any]:
    queue = list(reversed(requests))
    ok = 0

    async def worker(http: httpx.AsyncClient) -> None:
        nonlocal ok
        while queue:
            body = queue.pop()
            while True:
                r = await http.post(f"{url}/v1/chat/completions", json=body, timeout=120)
                if r.status_code != 503:  # the queue was full: retry, as a client does
                    break
                await asyncio.sleep(0.05)
            ok += r.status_code == 200

    started = time.perf_counter()
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=clients)) as http:
        await asyncio.gather(*(worker(http) for _ in range(clients)))
    seconds = time.perf_counter() - started
    return {"seconds": round(seconds, 2), "lines_per_s": round(len(requests) / seconds, 2), "ok": ok}


def ttfts(url: str, probes: int) -> list[float]:
    body = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 16, "stream": True}
    out = []
    for _ in range(probes):
        started = time.perf_counter()
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as r:
            lines = r.iter_lines()
            for line in lines:
                if line.startswith("data: ") and '"content":"' in line.replace(" ", ""):
                    out.append(time.perf_counter() - started)
                    break
            for _ in lines:
                pass
        time.sleep(0.05)
    return out


def ttfts_interleaved(live: LiveServer, requests: list[dict[str, Any]], probes: int,
                      block: int) -> tuple[list[float], list[float], float]:
    """TTFTs idle and during a batch, in alternating blocks; and the batch's lines per second
    while the probes ran beside it."""
    idle: list[float] = []
    during: list[float] = []
    lines, seconds = 0, 0.0
    while len(idle) < probes:
        idle += ttfts(live.url, block)
        client, batch_id = start_batch(live, requests)
        time.sleep(1.0)  # the batch fills its rows
        done_before = client.batches.retrieve(batch_id).request_counts.completed
        started = time.perf_counter()
        during += ttfts(live.url, block)
        lines += client.batches.retrieve(batch_id).request_counts.completed - done_before
        seconds += time.perf_counter() - started
        client.batches.cancel(batch_id)
        wait_batch(client, batch_id)
    return idle, during, lines / seconds


def summary(values: list[float]) -> dict[str, float]:
    ms = sorted(v * 1000 for v in values)
    return {"p50_ms": round(statistics.median(ms), 1), "p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 1),
            "mean_ms": round(statistics.fmean(ms), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--rate", type=float, default=200.0, help="forward passes per second")
    parser.add_argument("--max-active", type=int, default=8)
    parser.add_argument("--probes", type=int, default=20)
    parser.add_argument("--block", type=int, default=5, help="probes per idle or busy block")
    parser.add_argument("--skip-clients", action="store_true", help="no 32-client run (TTFT A/B runs)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    # The clients' run fills the queue on purpose (503, retried): not worth a line each.
    logging.getLogger("afm_struct.server").setLevel(logging.ERROR)
    tokenizer = load_tokenizer()
    requests = bodies(args.lines)
    result: dict[str, Any] = {"lines": args.lines, "clients": args.clients, "rate": args.rate,
                              "max_active": args.max_active, "machine": platform.platform(),
                              "command": " ".join(sys.argv)}
    with tempfile.TemporaryDirectory() as tmp:
        live = serve(tokenizer, args.rate, tmp, max_active=args.max_active,
                     batch_lines_in_flight=args.max_active)
        try:
            result["batch"] = run_batch(live, requests)
        finally:
            live.stop()
        live = serve(tokenizer, args.rate, tmp, max_active=args.max_active)
        try:
            if not args.skip_clients:
                result["clients_run"] = asyncio.run(run_clients(live.url, requests, args.clients))
            ttft_idle, during, lines_per_s = ttfts_interleaved(live, requests, args.probes, args.block)
            result["ttft_idle"] = summary(ttft_idle)
            result["ttft_during_batch"] = summary(during)
            # What the batch still gets while the probes run (they take rows and hold lines back).
            result["batch_lines_per_s_during_probes"] = round(lines_per_s, 2)
            result["batch_rows"] = ServerSettings().batch_lines_in_flight
        finally:
            live.stop()
    if "clients_run" in result:
        speed = result["batch"]["lines_per_s"] / result["clients_run"]["lines_per_s"]
        result["batch_vs_clients"] = round(speed, 2)
    result["ttft_ratio_p50"] = round(result["ttft_during_batch"]["p50_ms"] / result["ttft_idle"]["p50_ms"], 2)
    result["ttft_ratio_p90"] = round(result["ttft_during_batch"]["p90_ms"] / result["ttft_idle"]["p90_ms"], 2)
    result["load_average"] = [round(x, 2) for x in os.getloadavg()]  # the machine is shared: how busy
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
