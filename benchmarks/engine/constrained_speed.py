"""Constrained decode tok/s of the generator in-process: json_schema, greedy, fast-forward on.

Usage: python benchmarks/engine/constrained_speed.py [--runs 4] [--max-tokens 128]
Prints one JSON line: the median tok/s of the runs after the first (a warm-up).  Compare
builds from git worktrees with ``PYTHONPATH=<worktree>`` (the editable install otherwise
imports the main checkout's code), alternating, on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import statistics

SCHEMA = {"type": "object", "properties": {"items": {"type": "array", "items": {
    "type": "object", "properties": {"name": {"type": "string"}, "qty": {"type": "integer"}},
    "required": ["name", "qty"]}}}, "required": ["items"]}
PROMPT = "List twenty groceries with quantities as JSON."


def main() -> None:
    """Run the measurement and print its JSON line."""
    from afm_struct.decoding.generator import Finished, GenerationRequest, Generator
    from afm_struct.decoding.sampling import SamplingParams
    from afm_struct.grammar.compiler import compile_constraint
    from afm_struct.grammar.spec import JsonSchemaRequest
    from afm_struct.models import load_model

    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=128)
    args = ap.parse_args()
    loaded = load_model()
    constraint = compile_constraint(loaded.tokenizer, JsonSchemaRequest(SCHEMA))
    ids = loaded.tokenizer.encode_chat([{"role": "user", "content": PROMPT}])
    gen = Generator.from_loaded(loaded)
    rates, tokens = [], 0
    for _ in range(args.runs):
        request = GenerationRequest(ids, SamplingParams(temperature=0, max_tokens=args.max_tokens),
                                    constraint=constraint)
        for ev in gen.generate(request):
            if isinstance(ev, Finished):
                rates.append(ev.usage.completion_tokens / ev.timings.decode_s)
                tokens = ev.usage.completion_tokens
    print(json.dumps({"median_tok_s": round(statistics.median(rates[1:]), 2), "tokens": tokens}))


if __name__ == "__main__":
    main()
