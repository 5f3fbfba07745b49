"""Compile cost of a ``structural_tag`` (vLLM form, N tools) on the embedded tokenizer: the
project's compile (read, schema checks and rewrites, one Lark compile) against llguidance
compiling the same Lark grammar alone, fresh compiler per run (no cache hit).

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/structural_tag/compile_cost.py [--runs 7]

Results: README.md beside this file.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import llguidance

from afm_struct.grammar.compiler import ConstraintCompiler
from afm_struct.grammar.spec import CompileOptions, StructuralTagRequest
from afm_struct.grammar.structural_tag import read_structural_tag
from afm_struct.grammar.structural_tag_lark import structural_tag_lark
from afm_struct.models import load_tokenizer


def tool_schema(i: int) -> dict[str, Any]:
    """A typical tool's arguments: a string, a bounded integer, an enum list."""
    properties = {f"p{i}": {"type": "string"}, "n": {"type": "integer", "minimum": 0},
                  "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}}}
    return {"type": "object", "properties": properties, "required": [f"p{i}", "n"],
            "additionalProperties": False}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    tokenizer = load_tokenizer()
    for n in (1, 8, 32):
        tools = [{"begin": f"<fn=f{i}>", "schema": tool_schema(i), "end": "</fn>"} for i in range(n)]
        spec = {"structures": tools, "triggers": ["<fn="]}
        ours, raw = [], []
        for _ in range(args.runs):
            compiler = ConstraintCompiler(tokenizer, CompileOptions())
            lark = structural_tag_lark(read_structural_tag(spec, "p"), lambda b: json.dumps(b.schema))
            start = time.perf_counter()
            result = compiler.compile(StructuralTagRequest(json.dumps(spec)))
            ours.append((time.perf_counter() - start) * 1e3)
            assert result.mode == "enforced"
            start = time.perf_counter()
            grammar = llguidance.LLMatcher.grammar_from_lark(lark)
            llguidance.LLMatcher(compiler.llguidance.ll_tokenizer, grammar)
            raw.append((time.perf_counter() - start) * 1e3)
        p50, raw50 = statistics.median(ours), statistics.median(raw)
        print(f"{n:3d} structures: compile p50 {p50:6.1f} ms, llguidance alone {raw50:6.1f} ms, "
              f"ratio {p50 / raw50:4.2f}")


if __name__ == "__main__":
    main()
