"""Every schema's compile outcome, for comparing two builds of the compiler (issue 43 item 3).

    python benchmarks/masks/compile_outcomes.py dump OUT.jsonl [--vocab llama3_1] [--limit N]
    python benchmarks/masks/compile_outcomes.py compare BEFORE.jsonl AFTER.jsonl
    python benchmarks/masks/compile_outcomes.py dump OUT.jsonl --timeout 120 --files NAME...

``dump`` compiles each MaskBench schema (``/work/shared/jsonschemabench/data`` by default) through
the full constraint compiler and writes one line per schema: mode, rung, reason, rewrites and
their sites, and the grammar the engine was given (its text), or the error a request would get.
Run it once per build (``PYTHONPATH=<a copy of the other commit>`` for the other one);
``compare`` lists every schema whose outcome differs.  ``compile_timeout`` / ``compile_memory``
outcomes depend on the host's load and are counted apart, not compared (``--files`` and a longer
``--timeout`` compile those again, in both builds).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

DATA = Path("/work/shared/jsonschemabench/data")
_LOAD_BOUND = {"compile_timeout", "compile_memory"}


def outcome(compiler: Any, schema: Any) -> dict[str, Any]:
    """What compiling ``schema`` gives: the verdict and the grammar text, or the error."""
    from afm_struct.errors import AfmError
    from afm_struct.grammar.spec import JsonSchemaRequest

    try:
        c = compiler.compile(JsonSchemaRequest(schema))
    except AfmError as exc:
        return {"error": type(exc).__name__, "message": str(exc)}
    return {"mode": c.mode.value, "rung": c.rung.value, "reason": c.reason, "rewrites": list(c.rewrites),
            "sites": [list(s) for s in c.rewrite_sites], "grammar": getattr(c.grammar, "grammar", None)}


def dump(args: argparse.Namespace) -> int:
    from afm_struct.grammar.compiler import ConstraintCompiler
    from afm_struct.grammar.spec import CompileOptions
    from afm_struct.models import load_tokenizer
    from afm_struct_bench.vocabularies import fetch

    files = sorted(Path(args.schemas).glob("*.json"))
    if args.files:  # (the load-bound ones of a comparison, again with a longer limit)
        files = [f for f in files if f.name in set(args.files)]
    if args.limit:
        files = files[:: max(1, len(files) // args.limit)][: args.limit]
    tokenizer = load_tokenizer(str(fetch(args.vocab)) if args.vocab else None)
    compiler = ConstraintCompiler(tokenizer, CompileOptions(property_order=args.property_order,
                                                            cache_size=16, timeout_s=args.timeout))
    with open(args.out, "w") as out:
        for path in files:
            schema = json.loads(path.read_text())["schema"]
            out.write(json.dumps({"file": path.name, **outcome(compiler, schema)}) + "\n")
    return 0


def compare(args: argparse.Namespace) -> int:
    def load(path: str) -> dict[str, dict[str, Any]]:
        return {row["file"]: row for row in map(json.loads, Path(path).read_text().splitlines())}

    before, after = load(args.before), load(args.after)
    same = differ = load_bound = 0
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name), after.get(name)
        if a is not None and b is not None and _LOAD_BOUND & {a.get("reason"), b.get("reason")}:
            load_bound += 1
        elif a == b:
            same += 1
        else:
            differ += 1
            keys = sorted(k for k in set(a or {}) | set(b or {}) if (a or {}).get(k) != (b or {}).get(k))
            print(f"DIFFERS {name}: {keys}")
    print(f"{same} identical, {differ} differ, {load_bound} timed out or over memory in a build "
          "(not compared)")
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(required=True)
    d = sub.add_parser("dump")
    d.add_argument("out")
    d.add_argument("--schemas", default=str(DATA))
    d.add_argument("--vocab", default=None, help="a benchmark vocabulary (default: the embedded model's)")
    d.add_argument("--limit", type=int, default=0)
    d.add_argument("--timeout", type=float, default=10.0, help="compile time limit (s)")
    d.add_argument("--files", nargs="*", default=None, help="only these schema files (names)")
    d.add_argument("--property-order", default="schema", choices=("schema", "any"))
    d.set_defaults(func=dump)
    c = sub.add_parser("compare")
    c.add_argument("before")
    c.add_argument("after")
    c.set_defaults(func=compare)
    args = parser.parse_args()
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
