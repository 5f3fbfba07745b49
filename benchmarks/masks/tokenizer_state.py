"""What a tokenizer's derived state costs, and what owning it once saves (issue 31 part 4).

Per vocabulary: the time and resident memory each part of
:class:`~afm_struct.models.derived.DerivedParts` hold takes to build (the llguidance
tokenizer, the closing vocabulary, the token table, a compiler), the constructions counted
over many compiles across several sets of compile options and threads (each part once), what
an unshared part would cost again (a second llguidance tokenizer, as a compiler building its
own would), and the memory returned when the tokenizer is dropped (the old id-keyed module
caches kept it all for the life of the process).

    PYTHONPATH=. python benchmarks/masks/tokenizer_state.py --out benchmarks/masks/tokenizer_state.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import threading
import time
import weakref
from typing import Any


def rss_mb() -> float:
    """Resident memory of this process (MB)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def measured(fn: Any) -> tuple[Any, float, float]:
    """``fn()``, its wall time (s) and the resident memory it added (MB)."""
    gc.collect()
    m0, t0 = rss_mb(), time.perf_counter()
    out = fn()
    return out, round(time.perf_counter() - t0, 3), round(rss_mb() - m0, 1)


def with_state(name: str, compiles: int, row: dict[str, Any]) -> None:
    """Load the tokenizer of ``name``, build and use its state, record into ``row``; the
    tokenizer is dropped on return."""
    import llguidance.hf

    from afm_struct.decoding.logprobs import token_table
    from afm_struct.grammar.closer.vocab import closing_vocab_for
    from afm_struct.grammar.compiler import compile_constraint, get_compiler
    from afm_struct.grammar.engines.llguidance_engine import ll_tokenizer_for
    from afm_struct.grammar.spec import CompileOptions, JsonSchemaRequest
    from afm_struct.models import load_tokenizer
    from afm_struct_bench.vocabularies import fetch

    source = None if name == "embedded" else str(fetch(name))
    tokenizer, load_s, load_mb = measured(lambda: load_tokenizer(source))
    state = tokenizer.derived
    row.update(vocab=name, vocab_size=int(tokenizer.vocab_size), tokenizer={"s": load_s, "mb": load_mb})
    builders = {"ll_tokenizer": ll_tokenizer_for, "closing_vocab": closing_vocab_for,
                "token_table": token_table}
    for part, build in builders.items():
        _, s, mb = measured(lambda build=build: build(tokenizer))
        row[part] = {"s": s, "mb": mb}
    _, s, mb = measured(lambda: get_compiler(tokenizer, CompileOptions()))
    row["compiler"] = {"s": s, "mb": mb}
    options = [CompileOptions(whitespace=w, property_order=o)
               for w in ("default", "compact", "flexible") for o in ("schema", "any")]

    def work(k: int) -> None:
        for i in range(compiles // 4):
            schema = {"type": "object", "properties": {f"k{k}_{i}": {"type": "string"}}}
            compile_constraint(tokenizer, JsonSchemaRequest(schema), options[(i + k) % len(options)])

    t0 = time.perf_counter()
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    row["compiles"] = {"count": compiles // 4 * 4, "option_sets": len(options), "threads": 4,
                       "s": round(time.perf_counter() - t0, 2), "builds": dict(state.builds)}
    # What each compiler building its own llguidance tokenizer would add (time, memory).
    size = int(tokenizer.vocab_size)
    _, s, mb = measured(lambda: llguidance.hf.from_tokenizer(tokenizer.hf, n_vocab=size))
    more = len(options) - 1
    row["unshared_ll_tokenizer_each"] = {"s": s, "mb": mb, "would_add_for_option_sets": {
        "s": round(s * more, 1), "mb": round(mb * more, 1)}}
    row["rss_mb_with_state"] = round(rss_mb(), 1)
    row["_alive"] = weakref.ref(tokenizer)


def one_vocab(name: str, compiles: int) -> dict[str, Any]:
    """The figures of one vocabulary (``embedded`` or a name of afm_struct_bench/vocabularies.py)."""
    row: dict[str, Any] = {"rss_mb_before_load": round(rss_mb(), 1)}
    with_state(name, compiles, row)
    gc.collect()
    row["tokenizer_freed_after_drop"] = row.pop("_alive")() is None
    row["rss_mb_after_drop"] = round(rss_mb(), 1)
    # Freed memory stays in the allocator, so RSS hardly falls; a second load of the same model
    # shows it is reusable (the old id-keyed caches kept the first copy: RSS grew again).
    again: dict[str, Any] = {}
    with_state(name, 8, again)
    row["rss_mb_second_load_growth"] = round(again["rss_mb_with_state"] - row["rss_mb_with_state"], 1)
    gc.collect()
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", action="append", help="embedded, llama3_1, qwen3, gptoss (default all)")
    parser.add_argument("--compiles", type=int, default=200)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    names = args.vocab or ["embedded", "llama3_1", "qwen3", "gptoss"]
    rows = []
    for name in names:
        rows.append(one_vocab(name, args.compiles))
        print(json.dumps(rows[-1]), file=sys.stderr)
    report = {"command": "PYTHONPATH=. python benchmarks/masks/tokenizer_state.py " + " ".join(sys.argv[1:]),
              "load_average": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(),
              "vocabularies": rows}
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
