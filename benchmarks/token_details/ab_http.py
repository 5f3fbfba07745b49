"""What asking for token details costs a request, end to end: one scripted-model server, the
same JSON-schema request plain, with ``logprobs`` (top 5) and with ``X-AFM-Token-Details``
(whose alternatives are 5 too), in turn (numbers in README.md beside this file).

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/token_details/ab_http.py
"""

from __future__ import annotations

import json
import statistics
import time

import httpx

from afm_struct.models import load_tokenizer
from afm_struct.testing import scripted_loaded_model
from server.live import start_server

ITEMS = [{"name": f"item {i}", "price": i * 1.5, "tags": ["a", "b"]} for i in range(12)]
ANSWER = json.dumps({"items": ITEMS})
SCHEMA = {"type": "object", "properties": {"items": {"type": "array", "items": {
    "type": "object", "properties": {"name": {"type": "string"}, "price": {"type": "number"},
                                     "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["name", "price", "tags"], "additionalProperties": False}}},
    "required": ["items"], "additionalProperties": False}


def main() -> None:
    live = start_server(scripted_loaded_model(load_tokenizer(), ANSWER))
    body = {"messages": [{"role": "user", "content": "list"}], "max_tokens": 1000,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}}
    variants = {"plain": (body, {}),
                "logprobs top 5": ({**body, "logprobs": True, "top_logprobs": 5}, {}),
                "token details": (body, {"X-AFM-Token-Details": "true"})}
    times: dict[str, list[float]] = {name: [] for name in variants}
    tokens = 0
    try:
        for i in range(33):
            name = list(variants)[i % 3]
            payload, headers = variants[name]
            t0 = time.perf_counter()
            r = httpx.post(f"{live.url}/v1/chat/completions", json=payload, timeout=120, headers=headers)
            elapsed = time.perf_counter() - t0
            r.raise_for_status()
            tokens = r.json()["usage"]["completion_tokens"]
            if i >= 3:  # the first round warms up
                times[name].append(elapsed)
    finally:
        live.stop()
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:>15}: median {1e3 * med:7.1f} ms a request, {tokens / med:6.1f} tok/s "
              f"({tokens} tokens, {len(ts)} requests)")


if __name__ == "__main__":
    main()
