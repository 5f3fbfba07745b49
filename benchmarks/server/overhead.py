"""Server overhead: tokens/s streamed over HTTP vs the engine in-process, same prompt, greedy.

By default the server runs as ``afm-struct serve`` in its own process (as users run it) and
the engine runs use a Generator in this process while the server idles; ``--server inprocess``
serves the same loaded model from a uvicorn thread of this process instead (one process, one
copy of the weights, the client's GIL use counted against HTTP).  Runs alternate (engine, HTTP,
engine, HTTP, ...) so drift on a shared machine hits both sides alike; medians are reported.

Two rates per run:
* end-to-end: completion tokens / (request start → last token), prefill included;
* decode: (completion tokens - 1) / (first token → last token);
* same-run ratio: for each HTTP run, the engine's own time for that very generation (queue +
  prefill + decode, from the ``X-AFM-Profile`` timings) over the client's request → last
  token time.  Both clocks cover the same window, so neighbours' load cancels out.

Usage: LD_PRELOAD=$(.venv/bin/python -m afm_struct.models.blas) \
       .venv/bin/python benchmarks/server/overhead.py [--runs 5] [--max-tokens 128]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from afm_struct.client import Client
from afm_struct.decoding.generator import Finished, GenerationRequest, Generator, TextDelta
from afm_struct.decoding.sampling import SamplingParams
from afm_struct.models import load_model
from afm_struct.models.blas import blas_in_use
from server.live import LiveServer, start_server

PROMPT = [{"role": "user", "content": "Write a long story about a lighthouse keeper and a storm."}]
HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rates(tokens: int, t0: float, first: float, last: float) -> dict:
    """End-to-end and decode-only tokens/s of one run."""
    return {"tokens": tokens, "e2e_tok_s": tokens / (last - t0),
            "decode_tok_s": (tokens - 1) / (last - first)}


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU time of this process, plus ``pid``'s (the server) when given.

    On a shared machine wall-clock rates swing with other people's load; CPU time spent per
    token does not (much), so its ratio is the steadier estimate of the HTTP layer's cost.
    """
    t = os.times()
    total = t.user + t.system
    if pid is not None:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def engine_run(gen: Generator, prompt_ids: list[int], max_tokens: int) -> dict:
    """One greedy generation on this thread, timed like the HTTP client times a stream."""
    params = SamplingParams(temperature=0, max_tokens=max_tokens)
    t0 = time.perf_counter()
    first = last = None
    tokens = 0
    for event in gen.generate(GenerationRequest(prompt_ids, params)):
        now = time.perf_counter()
        if isinstance(event, TextDelta):
            first = first or now
            last = now
        elif isinstance(event, Finished):
            tokens = event.usage.completion_tokens
    assert first is not None and last is not None
    return rates(tokens, t0, first, last)


def http_run(client: Client, max_tokens: int) -> dict:
    """One greedy streamed generation over HTTP with the afm_struct client."""
    t0 = time.perf_counter()
    first = last = None
    result = None
    for event in client.stream(PROMPT, max_tokens=max_tokens, temperature=0, profile="true",
                               stream_options={"include_usage": True}):
        now = time.perf_counter()
        if event.kind == "delta":
            first = first or now
            last = now
        elif event.kind == "done":
            result = event.data
    assert first is not None and last is not None and result is not None and result.profile
    row = rates(result.usage["completion_tokens"], t0, first, last)
    # The same generation as the engine inside the server timed it (queue + prefill + decode):
    # client and engine share the time window, so other processes' load cancels out.
    timing = result.profile["timing"]
    engine_s = timing["queued_s"] + timing["prefill_s"] + timing["decode_s"]
    row["same_run_ratio"] = engine_s / (last - t0)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--server", choices=["subprocess", "inprocess"], default="subprocess")
    parser.add_argument("--out", default=None, help="default: overhead-<server>.json here")
    args = parser.parse_args()

    server: Any = None
    live: LiveServer | None = None
    try:
        loaded = load_model()
        gen = Generator.from_loaded(loaded)
        prompt_ids = loaded.tokenizer.encode_chat(PROMPT)
        if args.server == "inprocess":
            live = start_server(loaded)
            url = live.url
        else:
            port = free_port()
            exe = Path(sys.executable).with_name("afm-struct")
            server = subprocess.Popen([str(exe), "serve", "--port", str(port), "--log-level", "warning"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ))
            url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if (server is not None and server.poll() is not None) or time.monotonic() > deadline:
                err = server.stderr.read().decode() if server.stderr else ""
                raise SystemExit(f"server did not start: {err}")
            time.sleep(0.2)
        with Client(url) as client:
            engine_run(gen, prompt_ids, 8)  # warm-up both sides
            http_run(client, 8)
            engine, http = [], []
            pid = server.pid if server is not None else None

            def timed(run: Any, *run_args: Any) -> dict:
                c0 = cpu_seconds(pid)
                row = run(*run_args)
                row["cpu_ms_per_token"] = (cpu_seconds(pid) - c0) * 1e3 / row["tokens"]
                return dict(row)

            for i in range(args.runs):
                # alternate which side goes first so slow drift does not favour one side
                if i % 2 == 0:
                    engine.append(timed(engine_run, gen, prompt_ids, args.max_tokens))
                    http.append(timed(http_run, client, args.max_tokens))
                else:
                    http.append(timed(http_run, client, args.max_tokens))
                    engine.append(timed(engine_run, gen, prompt_ids, args.max_tokens))
                print(f"run {i + 1}: engine {engine[-1]['decode_tok_s']:.2f} tok/s, "
                      f"http {http[-1]['decode_tok_s']:.2f} tok/s ({http[-1]['tokens']} tokens)", flush=True)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=20)
        if live is not None:
            live.stop()

    def med(rows: list[dict], key: str) -> float:
        return round(statistics.median(r[key] for r in rows), 3)

    summary = {
        "server": args.server, "openblas_num_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        "model": loaded.info.id, "device": loaded.info.device, "blas": blas_in_use(),
        "runs": args.runs, "max_tokens": args.max_tokens,
        "tokens": [r["tokens"] for r in http],
        "engine": {k: med(engine, k) for k in ("e2e_tok_s", "decode_tok_s", "cpu_ms_per_token")},
        "http": {k: med(http, k) for k in ("e2e_tok_s", "decode_tok_s", "cpu_ms_per_token")},
    }
    # engine CPU per token / HTTP CPU per token: the rate ratio when CPU is the bottleneck
    summary["same_run_ratio_median"] = med(http, "same_run_ratio")
    cpu = summary["engine"]["cpu_ms_per_token"], summary["http"]["cpu_ms_per_token"]
    summary["cpu_ratio"] = round(cpu[0] / cpu[1], 3)
    summary["ratio_e2e"] = round(summary["http"]["e2e_tok_s"] / summary["engine"]["e2e_tok_s"], 3)
    summary["ratio_decode"] = round(summary["http"]["decode_tok_s"] / summary["engine"]["decode_tok_s"], 3)
    # adjacent runs share the machine's momentary load: their ratio is the steadier estimate
    summary["paired_ratio_e2e_median"] = round(statistics.median(
        h["e2e_tok_s"] / e["e2e_tok_s"] for e, h in zip(engine, http, strict=True)), 3)
    summary["load_average"] = os.getloadavg()
    summary["raw"] = {"engine": engine, "http": http}
    out = Path(args.out) if args.out else HERE / f"overhead-{args.server}.json"
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "raw"}, indent=2))
    return 0 if summary["ratio_e2e"] >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main())
