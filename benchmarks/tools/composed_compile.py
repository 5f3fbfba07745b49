"""Compile time of a tool grammar alone vs composed with a JSON answer (issue 49.1), per syntax.

Cold compiles: every compile gets schemas no earlier compile saw (a fresh property name), so no
cache answers.  The two variants alternate within each syntax (A/B, B/A, ...) so machine load
falls on both; the median of ``--reps`` compiles each is printed.  The composed figure includes
compiling the answer's schema on its own (the ladder's verdict); in the server that compile is
the output format's own, already cached when the tool grammar is built.

    .venv/bin/python benchmarks/tools/composed_compile.py --reps 5
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from typing import Any

from afm_struct.grammar.spec import JsonSchemaRequest
from afm_struct.models import load_tokenizer
from afm_struct.tools import load_table, plan_tools


def schemas(i: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the answer's schema, the tool's parameters), unique to ``i``."""
    answer = {"type": "object",
              "properties": {f"q{i}": {"type": "string", "maxLength": 5}, "n": {"type": "integer"}},
              "required": [f"q{i}"], "additionalProperties": False}
    params = {"type": "object", "properties": {f"city{i}": {"type": "string"},
                                               "days": {"type": "integer", "minimum": 1}},
              "required": [f"city{i}"], "additionalProperties": False}
    return answer, params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    tokenizer = load_tokenizer()
    unique = itertools.count()
    for fmt in load_table().formats:
        times: dict[bool, list[float]] = {False: [], True: []}
        for rep in range(args.reps):
            for composed in ((False, True) if rep % 2 == 0 else (True, False)):
                answer, params = schemas(next(unique))
                tools = [{"type": "function",
                          "function": {"name": "lookup", "strict": True, "parameters": params}}]
                base = plan_tools(tokenizer, tools, "auto", messages=[{"role": "user", "content": "x"}],
                                  format_name=fmt.name, compile_grammar=False)
                start = time.perf_counter()
                request = JsonSchemaRequest(answer, strict=True) if composed else None
                plan = base.constrained(tokenizer, answer=request)
                times[composed].append((time.perf_counter() - start) * 1000)
                assert plan.answered is composed
        alone, both = statistics.median(times[False]), statistics.median(times[True])
        print(f"| {fmt.name} | {alone:.1f} | {both:.1f} |")


if __name__ == "__main__":
    main()
