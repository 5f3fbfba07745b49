"""How long a huge prompt pauses another request's stream (issue 46, finding 10).

A scripted model (the embedded tokenizer, one token per 10 ms step) serves one stream of 300
tokens; one second in, another client sends a chat request whose prompt is one 600,000-character
word, or 200,000 CJK characters (refused for the context after it is tokenized, or served).  The
stream's longest gap between two chunks is the pause; its median gap the baseline.

    PYTHONPATH=. LD_PRELOAD=/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 \
        .venv/bin/python benchmarks/hostile/huge_prompt.py [--runs 3]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import threading
import time

import httpx

from afm_struct.models import load_tokenizer
from afm_struct.testing import Script, scripted_loaded_model
from server.live import start_server

PROMPTS = {"600k-char word": "a" * 600_000, "200k CJK chars": "漢字かな" * 50_000,
           "600k mixed word": "xq7Z" * 150_000}


def one_run(url: str, prompt: str) -> tuple[float, float, int]:
    """(longest gap, median gap, the huge request's status)."""
    arrivals: list[float] = []
    status: list[int] = []

    def huge() -> None:
        time.sleep(1.0)
        r = httpx.post(f"{url}/v1/chat/completions", timeout=120, json={
            "messages": [{"role": "user", "content": prompt}], "max_tokens": 4})
        status.append(r.status_code)

    sender = threading.Thread(target=huge)
    sender.start()
    body = {"messages": [{"role": "user", "content": "count"}], "max_tokens": 300, "stream": True}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=120) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                arrivals.append(time.perf_counter())
    sender.join()
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    return max(gaps), statistics.median(gaps), status[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    tokenizer = load_tokenizer()
    loaded = scripted_loaded_model(tokenizer, Script(" ".join(str(i) for i in range(1, 400)), delay_s=0.01),
                                   context_length=8192)
    live = start_server(loaded)
    try:
        out = {}
        for name, prompt in PROMPTS.items():
            runs = [one_run(live.url, prompt) for _ in range(args.runs)]
            out[name] = {"longest_gap_ms": [round(r[0] * 1e3) for r in runs],
                         "median_gap_ms": [round(r[1] * 1e3, 1) for r in runs],
                         "status": sorted({r[2] for r in runs})}
            print(name, json.dumps(out[name]), flush=True)
    finally:
        live.stop()


if __name__ == "__main__":
    main()
