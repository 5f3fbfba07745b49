"""Where a compile's CPU goes, phase by phase, on the calling thread (issue 43 item 3, round 2).

    .venv/bin/python benchmarks/masks/compile_phases.py [ROUNDS]
    PYTHONPATH=<a copy of another commit> .venv/bin/python benchmarks/masks/compile_phases.py

Compiles the 300-schema spread at 128k (Llama 3.1) with the compiler as it is (the exact
compile on its thread), the cache emptied before each compile, and charges each wrapped
function's ``time.thread_time`` to it when the calling thread runs it (the engine's build on
the compile thread is charged apart, as ``engine build (compile thread)``).  A phase's p50 is
over the schemas that ran it; ``calling thread, all`` is the whole ``compile`` call.
"""

from __future__ import annotations

import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import afm_struct.grammar.compiler as compiler_module
import afm_struct.grammar.engines.llguidance_engine as engine_module
import afm_struct.grammar.ladder as ladder_module
from afm_struct.grammar.cache import LRUCache
from afm_struct.grammar.spec import CompileOptions, JsonSchemaRequest
from afm_struct.models import load_tokenizer
from afm_struct_bench.vocabularies import fetch

DATA = Path("/work/shared/jsonschemabench/data")
# Module-level names the compiler calls (patched in compiler.py's namespace), then methods.
PHASES = ("schema_key", "schema_limits_reason", "mentioned_triggers", "longest_forced_run",
          "rewrite_schema", "check_schema", "climb", "check_some_output")
METHODS = ((ladder_module.LLGuidanceLadder, "start_exact"),
           (compiler_module.ConstraintCompiler, "_result"))
_acc: dict[str, float] = {}
_MAIN = threading.get_ident()


def _timed(name: str, fn: Any, *, off_main: bool = False) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        on_main = threading.get_ident() == _MAIN
        if on_main == off_main:
            return fn(*args, **kwargs)
        c0 = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            _acc[name] = _acc.get(name, 0.0) + time.thread_time() - c0
    return wrapper


def main(rounds: int = 2) -> None:
    """Print each phase's p50 (and the mean of the middle 60 %) over ``rounds`` passes."""
    files = sorted(DATA.glob("*.json"))
    docs = [json.loads(p.read_text())["schema"] for p in files[:: len(files) // 300][:300]]
    tokenizer = load_tokenizer(str(fetch("llama3_1")))
    for name in PHASES:
        setattr(compiler_module, name, _timed(name, getattr(compiler_module, name)))
    for owner, name in METHODS:
        setattr(owner, name, _timed(name, getattr(owner, name)))
    engine_module.LLGuidanceEngine._build = _timed(  # type: ignore[method-assign]
        "engine build (compile thread)", engine_module.LLGuidanceEngine._build, off_main=True)
    compiler = compiler_module.ConstraintCompiler(tokenizer, CompileOptions(cache_size=1000))
    compiler.compile(JsonSchemaRequest({"type": "object"}))
    rows: list[dict[str, float]] = []
    for _ in range(rounds):
        for schema in docs:
            compiler.cache = LRUCache(1000, 1e9)
            _acc.clear()
            c0 = time.thread_time()
            try:
                compiler.compile(JsonSchemaRequest(schema))
            except Exception:  # (a schema the compiler refuses: timed all the same)
                pass
            _acc["calling thread, all"] = time.thread_time() - c0
            rows.append(dict(_acc))
    for name in ("calling thread, all", *PHASES, *(n for _, n in METHODS), "engine build (compile thread)"):
        values = sorted(r[name] for r in rows if name in r)
        if not values:
            continue
        middle = values[len(values) // 5: len(values) * 4 // 5] or values
        print(f"{name:30s} p50 {statistics.median(values) * 1e3:.3f} ms, "
              f"mean of the middle 60 % {sum(middle) / len(middle) * 1e3:.3f} ms ({len(values)} compiles)")
    print(f"load {Path('/proc/loadavg').read_text().split()[0]}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
