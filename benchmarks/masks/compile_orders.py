"""Compile cost of each property order against raw llguidance, interleaved per schema.

For every k-th dev schema: the full compile (``ConstraintCompiler``, cache cleared) in
``property_order="schema"`` and ``"any"``, and raw llguidance (``LLMatcher`` on the JSON Schema
with the same JSON options), in alternating order, so that the machine's drift hits all three
alike.  Reports p50/p90/p99 of each and the median of the per-schema ratios.

    .venv/bin/python benchmarks/masks/compile_orders.py --every 4 --out benchmarks/masks/compile_orders.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from afm_struct.grammar.compiler import ConstraintCompiler
from afm_struct.grammar.engines.llguidance_engine import EngineCompileError, LLGuidanceEngine
from afm_struct.grammar.spec import CompileOptions, JsonSchemaRequest
from afm_struct.models import load_tokenizer
from afm_struct_bench.environment import environment

DATA = Path(__file__).resolve().parents[3] / "shared" / "jsonschemabench" / "data"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schemas", default=str(DATA))
    parser.add_argument("--every", type=int, default=4)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    tokenizer = load_tokenizer(None)
    raw = LLGuidanceEngine(tokenizer, CompileOptions())
    compilers = {order: ConstraintCompiler(tokenizer, CompileOptions(property_order=order, cache_size=2))
                 for order in ("schema", "any")}
    times: dict[str, list[float]] = {"raw": [], "schema": [], "any": []}
    files = sorted(Path(args.schemas).glob("*.json"))[:: args.every]
    for i, path in enumerate(files):
        schema = json.loads(path.read_text())["schema"]
        row: dict[str, float] = {}
        for kind in (("raw", "schema", "any") if i % 2 else ("any", "schema", "raw")):
            if kind == "raw":
                t0 = time.perf_counter()
                try:
                    raw.compile_json_schema(schema)
                except EngineCompileError:
                    pass
                row[kind] = (time.perf_counter() - t0) * 1e3
                continue
            compilers[kind].cache.clear()
            try:
                row[kind] = compilers[kind].compile(JsonSchemaRequest(schema)).compile_ms
            except Exception:  # an invalid schema: not a compile to time
                row = {}
                break
        for kind, ms in row.items():
            times[kind].append(ms)

    def pct(values: list[float]) -> dict[str, float]:
        return {f"p{q}": round(float(np.percentile(values, q)), 3) for q in (50, 90, 99)}

    arr = {k: np.asarray(v) for k, v in times.items()}
    report: dict[str, Any] = {
        "schemas": len(times["raw"]), "every": args.every,
        "compile_ms": {k: pct(v) for k, v in times.items()},
        "median_ratio": {"any_vs_schema": round(float(np.median(arr["any"] / arr["schema"])), 3),
                         "any_vs_raw": round(float(np.median(arr["any"] / arr["raw"])), 3),
                         "schema_vs_raw": round(float(np.median(arr["schema"] / arr["raw"])), 3)},
        "environment": environment(),
    }
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(json.dumps({k: report[k] for k in ("schemas", "compile_ms", "median_ratio")}, indent=1))


if __name__ == "__main__":
    main()
