"""What the compile thread costs, schema by schema: the compiler as it is against the same
compile with the engine called inline (issue 43 item 3, round 2).

    .venv/bin/python benchmarks/masks/compile_handoff_ab.py [ROUNDS] [VARIANTS]

``compile_inline_ab.py`` timed each variant in its own pass over the 300 schemas, passes
alternating; under a load that drifts from pass to pass (2 shared vCPUs, other engineers'
suites), a pass-level difference of a few tenths of a millisecond is the load's, not the
variant's.  Here every schema is compiled by every variant back to back (the order rotating
from schema to schema and round to round, the cache emptied before each compile), and the
difference is taken per schema: a drift in the load hits all variants of one schema alike.

Variants: ``threads`` (as it is: the exact compile on a compile thread, started early to
overlap the Python checks), ``thread_no_overlap`` (on the thread, the caller waiting for it
where the early start was: the handoff without the overlap) and ``inline`` (the engine on the
calling thread at the same place: no time limit, a measurement only).  Unlike
``compile_inline_ab.py``'s, the inline and no-overlap variants hand the engine the schema's text
as the early start does (there the engine's side dumped the schema three more times, ~0.03 ms
charged to inline).  Per variant: the p50 over schemas of each
schema's median CPU (``time.process_time``: every thread of the process) and wall; then the
median over schemas of the per-schema differences against ``inline``.  ``raw`` (always run):
raw llguidance's compile of the schema as given, as ``afm-struct bench masks --raw`` times it.
Raw's p50 is over all 300 schemas, those it refuses included (the bench's ratio takes only
those both compiled): the ratios here are for comparing variants, not the issue's number.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import afm_struct.grammar.ladder as ladder_module
from afm_struct.grammar.cache import LRUCache
from afm_struct.grammar.compiler import ConstraintCompiler
from afm_struct.grammar.engines.llguidance_engine import LLGuidanceEngine
from afm_struct.grammar.spec import CompileOptions, JsonSchemaRequest
from afm_struct.models import load_tokenizer
from afm_struct_bench.vocabularies import fetch

DATA = Path("/work/shared/jsonschemabench/data")
VARIANTS = ("threads", "thread_no_overlap", "inline")


def _done(value: Any = None, error: BaseException | None = None) -> cf.Future[Any]:
    future: cf.Future[Any] = cf.Future()
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
    return future


def _set_variant(variant: str, start_exact: Any, run_with_timeout: Any) -> None:
    """Every variant compiles the exact rung from the same place with the same arguments
    (the schema's text included: without it the engine's side dumps the schema three times)."""
    def at_once(self: Any, schema: Any, text: str | None = None) -> cf.Future[Any]:
        if variant == "thread_no_overlap":  # on the thread, the caller waiting for it
            try:
                return _done(run_with_timeout(lambda: self.build_exact(schema, text=text), 60.0))
            except Exception as exc:  # (the engine's refusal, as the early future would hold it)
                return _done(error=exc)
        try:
            return _done(self.build_exact(schema, text=text))
        except Exception as exc:
            return _done(error=exc)

    ladder_module.LLGuidanceLadder.start_exact = (  # type: ignore[method-assign]
        start_exact if variant == "threads" else at_once)
    ladder_module.run_with_timeout = (  # type: ignore[assignment]
        (lambda fn, _t: fn()) if variant == "inline" else run_with_timeout)


def main(rounds: int = 3, variants: tuple[str, ...] = VARIANTS) -> None:
    """Compile the 300-schema spread ``rounds`` times with every variant, schema by schema."""
    files = sorted(DATA.glob("*.json"))
    files = files[:: len(files) // 300][:300]
    docs = [json.loads(p.read_text())["schema"] for p in files]
    tokenizer = load_tokenizer(str(fetch("llama3_1")))
    originals = ladder_module.LLGuidanceLadder.start_exact, ladder_module.run_with_timeout
    compiler = ConstraintCompiler(tokenizer, CompileOptions(cache_size=1000))
    compiler.compile(JsonSchemaRequest({"type": "object"}))  # (the generic grammar, built once)
    raw = LLGuidanceEngine(tokenizer, CompileOptions())  # raw llguidance, as the bench's --raw
    variants = (*variants, "raw")
    cpu: dict[str, list[list[float]]] = {v: [[] for _ in docs] for v in variants}
    wall: dict[str, list[list[float]]] = {v: [[] for _ in docs] for v in variants}
    try:
        for r in range(rounds):
            for i, schema in enumerate(docs):
                turn = (i + r) % len(variants)
                for variant in variants[turn:] + variants[:turn]:
                    _set_variant(variant, *originals)
                    compiler.cache = LRUCache(1000, 1e9)
                    c0, w0 = time.process_time(), time.perf_counter()
                    try:
                        if variant == "raw":
                            raw.compile_json_schema(schema)
                        else:
                            compiler.compile(JsonSchemaRequest(schema))
                    except Exception:  # (a schema the compiler refuses: timed all the same)
                        pass
                    cpu[variant][i].append(time.process_time() - c0)
                    wall[variant][i].append(time.perf_counter() - w0)
            load = Path("/proc/loadavg").read_text().split()[0]
            print(f"round {r + 1}/{rounds} done, load {load}", flush=True)
    finally:
        _set_variant("threads", *originals)
    med = {clock: {v: [statistics.median(x) for x in data[v]] for v in variants}
           for clock, data in (("cpu", cpu), ("wall", wall))}
    raw_p50 = {clock: statistics.median(med[clock]["raw"]) for clock in med}
    for v in variants:
        c, w = statistics.median(med["cpu"][v]), statistics.median(med["wall"][v])
        print(f"{v:17s} CPU p50 {c * 1e3:.3f} ms ({c / raw_p50['cpu']:.2f}x raw), "
              f"wall p50 {w * 1e3:.3f} ms ({w / raw_p50['wall']:.2f}x raw)")
    if "inline" in variants:
        for v in variants:
            if v in ("inline", "raw"):
                continue
            for clock in ("cpu", "wall"):
                d = [a - b for a, b in zip(med[clock][v], med[clock]["inline"], strict=True)]
                print(f"{v} - inline, {clock}: median per-schema difference "
                      f"{statistics.median(d) * 1e3:+.3f} ms")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3,
         tuple(sys.argv[2].split(",")) if len(sys.argv) > 2 else VARIANTS)
