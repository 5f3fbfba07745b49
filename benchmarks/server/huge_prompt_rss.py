"""Resident memory of a server refusing prompts over its context (issue 26, item 3).

Starts ``afm-struct serve --model scripted`` (context 8192) from the checkout this file is in,
sends one ordinary request, reads the baseline RSS from /health, then sends N prompts of SIZE
characters of random words (each refused with context_length_exceeded) and reads RSS after
each.  SIZE 5000000 is far over the length bound (refused before tokenizing); 600000 is under
it (81 x 8192 characters) yet over the context, so it is tokenized, then refused::

    .venv/bin/python benchmarks/server/huge_prompt_rss.py --requests 20 --size 5000000
    .venv/bin/python benchmarks/server/huge_prompt_rss.py --requests 20 --size 600000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import string
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def words(n_chars: int, rng: random.Random) -> str:
    vocab = ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 9)))
             for _ in range(5000)]
    return " ".join(rng.choice(vocab) for _ in range(n_chars // 5))[:n_chars]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=20)
    p.add_argument("--size", type=int, default=5_000_000, help="characters per prompt")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    args = p.parse_args()
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen([sys.executable, "-m", "afm_struct.cli", "serve", "--model", "scripted",
                               "--port", str(port), "--log-level", "warning"], cwd=ROOT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                httpx.get(f"{url}/health", timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("the server did not start") from None
                time.sleep(0.5)

        def rss() -> int:
            return int(httpx.get(f"{url}/health", timeout=30).json()["rss_bytes"])

        httpx.post(f"{url}/v1/chat/completions", timeout=120,
                   json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5})
        baseline = rss()
        print(f"baseline {baseline / 1e6:.1f} MB", flush=True)
        rng = random.Random(0)
        rows = []
        for i in range(args.requests):
            body = json.dumps({"messages": [{"role": "user", "content": words(args.size, rng)}],
                               "max_tokens": 5}).encode()
            start = time.perf_counter()
            r = httpx.post(f"{url}/v1/chat/completions", content=body, timeout=600,
                           headers={"Content-Type": "application/json"})
            row = {"status": r.status_code, "code": r.json().get("error", {}).get("code"),
                   "seconds": round(time.perf_counter() - start, 2), "rss_bytes": rss()}
            rows.append(row)
            print(i, row["status"], row["code"], f"{row['seconds']}s", f"rss {row['rss_bytes'] / 1e6:.1f} MB",
                  flush=True)
        time.sleep(2)
        final = rss()
        print(f"after {args.requests}: {final / 1e6:.1f} MB ({final / baseline:.3f} x baseline)")
        if args.out:
            Path(args.out).write_text(json.dumps({"size": args.size, "baseline_bytes": baseline,
                                                  "final_bytes": final, "requests": rows}, indent=1))
    finally:
        server.terminate()
        server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
