"""Issue 46, findings 2 and 3, measured over real HTTP on a scripted model (in this process).

    .venv/bin/python benchmarks/hostile/grammar_work.py ambiguous [--before] [--hostile 1|4]
    .venv/bin/python benchmarks/hostile/grammar_work.py wide [--before] [--requests 16] [--props 10000]

``ambiguous``: an ordinary stream of 200 tokens (the scripted model sleeps 5 ms a forward pass)
runs alone, then beside ``--hostile`` requests of ``guided_grammar: "start: e\\ne: e e e | e e |
/[a-z0-9 ]/"``; printed: each hostile request's status and time to its answer, the stream's total
time and its longest gap between two chunks.  ``wide``: ``--requests`` concurrent strict schemas
of ``--props`` required properties (10,000: ~300 KB each); printed: statuses, this process's RSS before and
after, and its peak.  ``--before`` runs with the settings of before issue 46: llguidance's own item
limit (50,000), no grammar budget, no compile memory bounds.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections import Counter
from typing import Any

import httpx

from afm_struct.grammar.compiler import ConstraintCompiler
from afm_struct.grammar.engines import llguidance_engine as llguidance_backend
from afm_struct.grammar.spec import CompileOptions
from afm_struct.models import load_tokenizer
from afm_struct.testing import Script, scripted_loaded_model
from server.live import start_server
from server.settings import ServerSettings

AMBIGUOUS = "start: e\ne: e e e | e e | /[a-z0-9 ]/"
LETTERS = " ".join("abcdefghijklmnopqrstuvwxyz" * 20)
STORY = " ".join(f"w{i}" for i in range(400))


def _status(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) / 1024
    return 0.0


def _stream(url: str, out: dict[str, Any]) -> None:
    t0 = time.perf_counter()
    gaps, last = [], t0
    body = {"messages": [{"role": "user", "content": "story"}], "max_tokens": 200, "stream": True}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=600) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                now = time.perf_counter()
                gaps.append(now - last)
                last = now
    out.update(total_s=time.perf_counter() - t0, max_gap_s=max(gaps[1:]) if len(gaps) > 1 else 0.0,
               chunks=len(gaps))


def ambiguous(args: argparse.Namespace) -> None:
    tok = load_tokenizer()
    story = tok.encode("story")

    def script(prompt: list[int]) -> str:
        found = any(prompt[i:i + len(story)] == story for i in range(len(prompt)))
        return STORY if found else LETTERS

    settings = ServerSettings(grammar_budget_s=3600.0) if args.before else ServerSettings()
    live = start_server(scripted_loaded_model(tok, Script(script, delay_s=0.005)), settings)
    try:
        alone: dict[str, Any] = {}
        _stream(live.url, alone)
        beside: dict[str, Any] = {}
        thread = threading.Thread(target=_stream, args=(live.url, beside))
        results: list[tuple[int, float, str]] = []

        def hostile() -> None:
            t0 = time.perf_counter()
            r = httpx.post(f"{live.url}/v1/chat/completions", timeout=600, json={
                "messages": [{"role": "user", "content": "letters"}], "max_tokens": args.max_tokens,
                "guided_grammar": AMBIGUOUS})
            code = r.json().get("error", {}).get("code") if r.status_code != 200 else "ok"
            results.append((r.status_code, time.perf_counter() - t0, str(code)))

        thread.start()
        time.sleep(0.2)
        hostiles = [threading.Thread(target=hostile) for _ in range(args.hostile)]
        for h in hostiles:
            h.start()
        for h in [*hostiles, thread]:
            h.join()
        print(json.dumps({"mode": "before" if args.before else "after", "hostile": args.hostile,
                          "hostile_max_tokens": args.max_tokens,
                          "hostile_results": [{"status": s, "seconds": round(t, 2), "code": c}
                                              for s, t, c in results],
                          "stream_alone": {k: round(v, 3) for k, v in alone.items()},
                          "stream_beside": {k: round(v, 3) for k, v in beside.items()}}))
    finally:
        live.stop()


def wide(args: argparse.Namespace) -> None:
    tok = load_tokenizer()
    if args.before:
        options = CompileOptions(max_compile_mb=1 << 20, compile_memory_mb=1 << 20, cache_memory_mb=1 << 20)
    else:
        options = CompileOptions()
    compiler = ConstraintCompiler(tok, options)
    live = start_server(scripted_loaded_model(tok, "{}"), ServerSettings(max_queue=64),
                        compile_fn=lambda _tok, request: compiler.compile(request))
    try:
        rss0 = _status("VmRSS")
        results: list[tuple[int, str]] = []

        def one(i: int) -> None:
            props = {f"p{i}_{k}": {"type": "string"} for k in range(args.props)}
            schema = {"type": "object", "properties": props, "required": list(props),
                      "additionalProperties": False}
            r = httpx.post(f"{live.url}/v1/chat/completions", timeout=600, json={
                "messages": [{"role": "user", "content": "fill"}], "max_tokens": 16,
                "response_format": {"type": "json_schema",
                                    "json_schema": {"name": "w", "strict": True, "schema": schema}}})
            what = (r.headers.get("x-grammar-constraints") or "exact") if r.status_code == 200 \
                else r.json()["error"]["code"]
            results.append((r.status_code, what))

        t0 = time.perf_counter()
        threads = [threading.Thread(target=one, args=(i,)) for i in range(args.requests)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        size_kb = len(json.dumps({f"p0_{k}": {"type": "string"} for k in range(args.props)})) / 1024
        print(json.dumps({"mode": "before" if args.before else "after", "requests": args.requests,
                          "properties": args.props,
                          "schema_kb": round(size_kb), "seconds": round(time.perf_counter() - t0, 1),
                          "results": dict(Counter(f"{s} {w}" for s, w in results)),
                          "rss_mb_before": round(rss0), "rss_mb_after": round(_status("VmRSS")),
                          "rss_mb_peak": round(_status("VmHWM")),
                          "cache_entries": len(compiler.cache),
                          "cache_weight_mb": round(compiler.cache.weight)}))
    finally:
        live.stop()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=("ambiguous", "wide"))
    p.add_argument("--before", action="store_true")
    p.add_argument("--hostile", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=200)
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--props", type=int, default=10_000, help="required properties per wide schema")
    args = p.parse_args()
    if args.before:
        llguidance_backend.DEFAULT_LIMITS.pop("step_max_items", None)  # llguidance's 50,000
    (ambiguous if args.what == "ambiguous" else wide)(args)


if __name__ == "__main__":
    main()
