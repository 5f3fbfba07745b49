"""Parser limits against the development set: per-step cost and verdicts, today's limits vs new.

    .venv/bin/python benchmarks/hostile/step_limits.py --limit 0 --out benchmarks/hostile/step_limits.json

For each MaskBench file: compile through the constraint compiler (its own limits); for each
schema served by llguidance, walk every test instance through two matchers of the same grammar
text, one under ``--old`` limits and one under ``--new``, timing each step (mask + consume).
A verdict that differs is listed: a legit schema the new limits refuse would show there.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import llguidance
import numpy as np

from afm_struct.grammar.compiler import ConstraintCompiler
from afm_struct.grammar.engines.llguidance_engine import ll_tokenizer_for
from afm_struct.grammar.engines.protocol import mask_words
from afm_struct.grammar.spec import JsonSchemaRequest
from afm_struct.models import load_tokenizer
from afm_struct_bench.masks import DEFAULT_DIR

OLD = {"max_lexer_states": 250_000, "max_grammar_size": 500_000, "initial_lexer_fuel": 1_000_000,
       "step_lexer_fuel": 200_000}


def walk(matcher: llguidance.LLMatcher, tokens: list[int], row: np.ndarray, steps: list[float]) -> bool:
    words = row.shape[0]
    for t in tokens:
        t0 = time.perf_counter()
        matcher.unsafe_compute_mask_ptr(row.ctypes.data, words * 4)
        if matcher.is_error() or not (int(row[t >> 5]) >> (t & 31)) & 1:
            steps.append(time.perf_counter() - t0)
            return False
        ok = matcher.consume_token(t)
        steps.append(time.perf_counter() - t0)
        if not ok:
            return False
    return bool(matcher.is_accepting())


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--limit", type=int, default=0)
    p.add_argument("--new", default=None, help="JSON: the new limits (default: the backend's DEFAULT_LIMITS)")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    from afm_struct.grammar.engines.llguidance_engine import DEFAULT_LIMITS

    new = {**OLD, **json.loads(args.new)} if args.new else dict(DEFAULT_LIMITS)
    tok = load_tokenizer()
    llt = ll_tokenizer_for(tok)
    compiler = ConstraintCompiler(tok)
    row = np.zeros(mask_words(tok.vocab_size), dtype=np.int32)
    files = sorted(Path(DEFAULT_DIR).glob("*.json"))
    if args.limit:
        files = files[:: max(1, len(files) // args.limit)][: args.limit]
    old_steps: list[float] = []
    new_steps: list[float] = []
    differ, walked, schemas, worst = [], 0, 0, []
    for path in files:
        doc = json.loads(path.read_text())
        try:
            c = compiler.compile(JsonSchemaRequest(doc["schema"]))
        except Exception:
            continue
        grammar = getattr(c.grammar, "grammar", None)
        if not isinstance(grammar, str):
            continue
        schemas += 1
        mo = llguidance.LLMatcher(llt, grammar, log_level=0, limits=llguidance.LLParserLimits(**OLD))
        mn = llguidance.LLMatcher(llt, grammar, log_level=0, limits=llguidance.LLParserLimits(**new))
        file_max = 0.0
        for test in doc.get("tests", []):
            tokens = tok.encode(json.dumps(test["data"], indent=None, ensure_ascii=False))
            so: list[float] = []
            sn: list[float] = []
            a = walk(mo.deep_copy(), tokens, row, so)
            b = walk(mn.deep_copy(), tokens, row, sn)
            walked += 1
            old_steps += so
            new_steps += sn
            file_max = max([file_max, *so])
            if a != b:
                differ.append({"file": path.name, "old": a, "new": b})
        worst.append((file_max * 1e3, path.name))
    worst.sort(reverse=True)

    def pct(v: list[float]) -> dict[str, float]:
        arr = np.asarray(v) * 1e6
        return {f"p{q}": round(float(np.percentile(arr, q)), 1) for q in (50, 99, 99.99)} | {
            "max": round(float(arr.max()), 1)}

    report = {"old_limits": OLD, "new_limits": new, "schemas": schemas, "instances": walked,
              "steps": len(old_steps), "old_step_us": pct(old_steps), "new_step_us": pct(new_steps),
              "verdicts_differ": differ, "slowest_files_ms": [[round(m, 2), f] for m, f in worst[:10]]}
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "slowest_files_ms"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
