"""The engine's CPU per generated token at N streams, no HTTP (issue 40): the served scripted
model with no forward time, N requests at once through ``Generator`` on this thread, free and
json_schema (the ``bench serve`` schemas, greedy), CPU time of this process per token.

Less noisy than a load test on a shared machine (CPU time, not wall), and it runs the engine of
whatever ``afm_struct`` is first on the path, so two builds compare back to back:

    PYTHONPATH=/path/to/other/checkout python benchmarks/serve/engine_step_cost.py --streams 32
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from afm_struct.decoding.generator import Finished, GenerationRequest, Generator
from afm_struct.decoding.length_close import shortest_output
from afm_struct.decoding.sampling import SamplingParams
from afm_struct.grammar.compiler import compile_constraint
from afm_struct.grammar.spec import JsonSchemaRequest
from afm_struct.testing import served_scripted_model
from afm_struct_bench.serve import PROMPTS, SCHEMAS


def one_run(gen: Generator, tokenizer, streams: int, max_tokens: int, constrained: bool,
            constraints: list) -> tuple[int, float]:
    """(tokens, CPU seconds) of ``streams`` requests generated together."""
    finished: list[Finished] = []
    for i in range(streams):
        k = i % len(SCHEMAS)
        prompt = tokenizer.encode_chat([{"role": "user", "content": PROMPTS[k]}])
        gen.add(GenerationRequest(prompt, SamplingParams(temperature=0.0, max_tokens=max_tokens),
                                  constraint=constraints[k] if constrained else None),
                lambda e: finished.append(e) if isinstance(e, Finished) else None)
    cpu = time.process_time()
    while gen.has_work:
        gen.step()
    cpu = time.process_time() - cpu
    return sum(f.usage.completion_tokens for f in finished), cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=200)
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args()
    loaded = served_scripted_model(1e9)  # ~no forward time: the engine's own cost
    tokenizer = loaded.tokenizer
    gen = Generator.from_loaded(loaded, max_batch=max(args.streams, 8))
    constraints = [compile_constraint(tokenizer, JsonSchemaRequest(s)) for s in SCHEMAS]
    for c in constraints:  # the server's admission: the closer's first plan (length_close.py)
        shortest_output(c, tokenizer)
    one_run(gen, tokenizer, args.streams, 20, True, constraints)  # warm-up
    us: dict[str, list[float]] = {"free": [], "json_schema": []}
    for _ in range(args.runs):  # alternated, so drift hits both
        for mix in us:
            tokens, cpu = one_run(gen, tokenizer, args.streams, args.max_tokens, mix == "json_schema",
                                  constraints)
            us[mix].append(cpu / tokens * 1e6)
    med = {m: statistics.median(v) for m, v in us.items()}
    print(json.dumps({"streams": args.streams, "max_tokens": args.max_tokens,
                      "cpu_us_per_token": {m: [round(x) for x in v] for m, v in us.items()},
                      "median": {m: round(x) for m, x in med.items()},
                      "json_schema_vs_free": round(med["json_schema"] / med["free"], 2)}))


if __name__ == "__main__":
    main()
