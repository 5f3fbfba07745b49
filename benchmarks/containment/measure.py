"""Containment, chosen by measurement (issue 46, item 1): what each option adds to a compile.

(a) a worker process: the engine's JSON-to-grammar step (where llguidance 1.9.1 crashes) run in
    a long-lived child, one pipe round trip per compile; the parent still builds the matcher
    itself (an ``LLMatcher`` cannot cross processes), so this is the cheapest form of (a);
    containing the matcher build too would mean compiling twice.
(b) the number guard (afm_struct/grammar/engines/llguidance_numbers.py) on the caller's thread.

Per schema of the dev-set spread (every k-th file, as ``bench masks --limit N --spread``), the
median of 3 alternating repetitions of each: (a) wall time of the round trip, (b) CPU time of
``number_issues``.  Run from the repository root:

    .venv/bin/python benchmarks/containment/measure.py --limit 300 --out benchmarks/containment/sample300.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from afm_struct.grammar.engines.llguidance_numbers import number_issues

CHILD = r"""
import sys, llguidance
out = sys.stdout
for line in sys.stdin:
    text = line.rstrip("\n")
    try:
        g = llguidance.LLMatcher.grammar_from_json_schema(text)
        err = llguidance.LLMatcher.validate_grammar(g)
    except Exception as e:
        err = str(e)
    out.write("1\n" if not err else "0\n")
    out.flush()
"""


def percentiles(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    return {f"p{p}": round(values[min(len(values) - 1, int(len(values) * p / 100))], 1) for p in (50, 90, 99)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--schemas", default="/work/shared/jsonschemabench/data")
    parser.add_argument("--limit", type=int, default=300)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    files = sorted(Path(args.schemas).glob("*.json"))
    files = files[:: max(1, len(files) // args.limit)][: args.limit]
    texts = [json.dumps(json.loads(f.read_text())["schema"], separators=(",", ":")) for f in files]
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env=env)
    assert child.stdin is not None and child.stdout is not None
    worker_us: list[float] = []
    guard_us: list[float] = []
    suspects = 0
    for text in texts:
        schema = json.loads(text)
        rounds_w, rounds_g = [], []
        for _ in range(3):
            start = time.perf_counter()
            child.stdin.write(text.replace("\n", " ") + "\n")
            child.stdin.flush()
            child.stdout.readline()
            rounds_w.append((time.perf_counter() - start) * 1e6)
            start = time.thread_time()
            number_issues(schema, text)
            rounds_g.append((time.thread_time() - start) * 1e6)
        worker_us.append(statistics.median(rounds_w))
        guard_us.append(statistics.median(rounds_g))
        suspects += bool(number_issues(schema, text))
    child.stdin.close()
    child.wait(timeout=10)
    report = {
        "schemas": len(texts), "load_average": os.getloadavg(), "cpus": os.cpu_count(),
        "worker_round_trip_wall_us": percentiles(worker_us),
        "guard_cpu_us": percentiles(guard_us),
        "schemas_with_issues": suspects,
        "command": " ".join(sys.argv),
    }
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
