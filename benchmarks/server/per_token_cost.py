"""The server's own cost per streamed token, measured without model compute.

A scripted model (no matmuls, ~free forward) makes generation cost almost nothing, so the
difference between streaming it over HTTP and generating it in-process is the HTTP layer's
per-token cost (scheduler hand-off, routing, chunk JSON, SSE write, client parse).  Server and
client share this process (uvicorn in a thread), so GIL contention is counted against HTTP: an
upper bound.  With that cost c and an engine rate r, the HTTP rate is r / (1 + c·r).

Usage: LD_PRELOAD=$(.venv/bin/python -m afm_struct.models.blas) \
       .venv/bin/python benchmarks/server/per_token_cost.py [--tokens 400] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from afm_struct.client import Client
from afm_struct.decoding.generator import GenerationRequest, Generator
from afm_struct.decoding.sampling import SamplingParams
from afm_struct.models import load_tokenizer
from afm_struct.testing import Script, scripted_loaded_model
from server.live import start_server

PROMPT = [{"role": "user", "content": "count"}]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=400)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--engine-rate", type=float, default=20.0,
                        help="a real model's in-process tok/s, for the predicted ratio")
    parser.add_argument("--out", default=str(Path(__file__).with_name("per_token_cost.json")))
    args = parser.parse_args()

    tok = load_tokenizer()
    text = " ".join(f"w{i}" for i in range(args.tokens))
    loaded = scripted_loaded_model(tok, Script(text))
    gen = Generator.from_loaded(loaded)
    ids = tok.encode_chat(PROMPT)
    live = start_server(scripted_loaded_model(tok, Script(text)))
    engine_s, http_s, n_tokens = [], [], 0
    try:
        with Client(live.url) as client:
            for _ in range(args.runs + 1):  # the first round warms up
                t0 = time.perf_counter()
                events = list(gen.generate(GenerationRequest(ids, SamplingParams(temperature=0,
                                                                                 max_tokens=10_000))))
                t1 = time.perf_counter()
                result = client.chat(PROMPT, temperature=0, stream_options={"include_usage": True})
                t2 = time.perf_counter()
                n_tokens = result.usage["completion_tokens"]
                assert events[-1].usage.completion_tokens == n_tokens
                engine_s.append((t1 - t0) / n_tokens)
                http_s.append((t2 - t1) / n_tokens)
    finally:
        live.stop()
    engine, http = statistics.median(engine_s[1:]), statistics.median(http_s[1:])
    cost = http - engine
    r = args.engine_rate
    summary = {"tokens": n_tokens, "runs": args.runs,
               "engine_ms_per_token": round(engine * 1e3, 4), "http_ms_per_token": round(http * 1e3, 4),
               "server_cost_ms_per_token": round(cost * 1e3, 4),
               "predicted_ratio_at_engine_rate": {"engine_tok_s": r, "ratio": round(1 / (1 + cost * r), 4)}}
    Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
