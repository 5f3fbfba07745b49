"""What the compile threads cost: our compile as it is against the same compile run inline.

Alternates, per pass over the 300-schema spread at 128k (Llama 3.1), the compiler as it is
(the exact compile on a compile thread, started early to overlap the Python checks) and the
same compiler with the engine called on the calling thread (``start_exact`` off,
``run_with_timeout`` calling its function directly).  The inline variant has no time limit:
it is a measurement, never a way to serve (the limit is why the thread exists).

    .venv/bin/python benchmarks/masks/compile_inline_ab.py [PASSES]

``serial_thread``: the exact compile still on a compile thread (the time limit kept) but started
only after the Python checks (no overlap).

Superseded (round 2, compile43_round2.md): each variant here has its own pass, so a load that
drifts between passes reads as a difference between variants, and the inline and serial
variants compile the exact rung without the schema's text (the engine's side dumps the schema
three more times).  ``compile_handoff_ab.py`` pairs the variants schema by schema instead.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import afm_struct.grammar.compiler as compiler_module
import afm_struct.grammar.ladder as ladder_module
from afm_struct.grammar.spec import CompileOptions, JsonSchemaRequest
from afm_struct.models import load_tokenizer
from afm_struct_bench.vocabularies import fetch

DATA = Path("/work/shared/jsonschemabench/data")
# As it is; the exact compile on a thread but not overlapped (started after the checks); inline.
VARIANTS = ("threads", "serial_thread", "inline")


def main(passes: int = 9) -> None:
    files = sorted(DATA.glob("*.json"))
    files = files[:: len(files) // 300][:300]
    docs = [json.loads(p.read_text())["schema"] for p in files]
    tokenizer = load_tokenizer(str(fetch("llama3_1")))
    start_exact, run_with_timeout = ladder_module.LLGuidanceLadder.start_exact, ladder_module.run_with_timeout
    for i in range(passes):
        variant = VARIANTS[i % len(VARIANTS)]
        inline = variant == "inline"
        ladder_module.LLGuidanceLadder.start_exact = (  # type: ignore[method-assign]
            start_exact if variant == "threads" else (lambda self, schema, text=None: None))
        ladder_module.run_with_timeout = (lambda fn, _t: fn()) if inline else run_with_timeout  # type: ignore[assignment]
        compiler = compiler_module.ConstraintCompiler(tokenizer, CompileOptions(cache_size=1000))
        compiler.compile(JsonSchemaRequest({"type": "object"}))
        cpu, wall = [], []
        for schema in docs:
            c0, w0 = time.process_time(), time.perf_counter()
            try:
                compiler.compile(JsonSchemaRequest(schema))
            except Exception:  # (a schema the compiler refuses: timed all the same)
                pass
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
        load = Path("/proc/loadavg").read_text().split()[0]
        print(f"{variant}: CPU p50 {statistics.median(cpu) * 1e3:.3f} ms, "
              f"wall p50 {statistics.median(wall) * 1e3:.3f} ms, load {load}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 9)
