"""``afm-struct bench extract``: extraction tasks with known answers, free vs constrained decoding.

Each task (``data/extract_tasks.json``) is a realistic source text, a JSON Schema and the
correct extraction.  Both modes get the *same* prompt (instruction + schema + source), the same
model, seed and sampling; the constrained mode adds the compiled schema grammar (fast-forward
on).  Per mode we measure JSON validity of the raw text, schema validity, the same two after
sanitizing (fences and prose stripped: what a careful client would salvage), and field-level
accuracy (:mod:`afm_struct_bench.scoring`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .scoring import score_fields

if TYPE_CHECKING:
    from afm_struct.models.tokenizer import Tokenizer

TASKS_FILE = Path(__file__).resolve().parent / "data" / "extract_tasks.json"
MODES = ("free", "constrained")
INSTRUCTION = ("Extract the information from the text below as one JSON object that matches this "
               "JSON Schema. Reply with the JSON object only.")


def load_tasks(path: Path = TASKS_FILE) -> list[dict[str, Any]]:
    """The task list: each with ``id``, ``category``, ``source``, ``schema`` and ``expected``."""
    return json.loads(Path(path).read_text())


def build_messages(task: dict[str, Any]) -> list[dict[str, str]]:
    """The chat both modes see: the schema is in the prompt so free decoding has a fair chance."""
    schema = json.dumps(task["schema"], ensure_ascii=False)
    content = f"{INSTRUCTION}\n\nSchema:\n{schema}\n\nText:\n{task['source']}"
    return [{"role": "user", "content": content}]


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return False
    return True


def judge(constraint: Any, expected: Any, text: str) -> dict[str, Any]:
    """Validity (raw and sanitized) and field accuracy of one output."""
    raw = constraint.validate(text)
    raw_json = _parses(text)
    clean_text = constraint.sanitize(text)
    clean = raw if clean_text == text else constraint.validate(clean_text)
    clean_json = _parses(clean_text)
    score = score_fields(expected, raw.value if raw_json else None)
    clean_score = score_fields(expected, clean.value if clean_json else None)
    return {
        "json_valid": raw_json, "schema_valid": raw.ok, "errors": list(raw.errors[:3]),
        "sanitized_json_valid": clean_json, "sanitized_schema_valid": clean.ok,
        "fields_matched": score.matched, "fields_total": score.total,
        "fields_matched_sanitized": clean_score.matched,
        "missing": list(score.missing), "wrong": list(score.wrong),
    }


def shortest_instance_tokens(tokenizer: Tokenizer, constraint: Any, vocab_size: int) -> int | None:
    """Tokens of the shortest instance the closing search finds from the grammar's start (an
    upper bound on the true minimum), or None if it finds none within its caps.

    A budget below it cannot hold any instance, so no decoding can make that output validate:
    the report separates those tasks from the ones the budget can hold.
    """
    from afm_struct.grammar.closer.completion import closing_vocab_for, shortest_completion

    matcher = constraint.new_matcher()
    if matcher is None:
        return None
    found = shortest_completion(matcher, closing_vocab_for(tokenizer), vocab_size=vocab_size,
                                decode=tokenizer.decode, max_tokens=2048)
    return None if found is None else len(found)


def _rate(rows: list[dict[str, Any]], key: str) -> float:
    return round(sum(1 for r in rows if r[key]) / len(rows), 4) if rows else 0.0


def summarize_mode(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Aggregate one mode's per-task judgements (micro-averaged field accuracy)."""
    total = sum(r["fields_total"] for r in rows)
    matched = sum(r["fields_matched"] for r in rows)
    matched_clean = sum(r["fields_matched_sanitized"] for r in rows)
    speeds = [r["decode_tok_s"] for r in rows if r.get("decode_tok_s")]
    ttfts = sorted(r["ttft_ms"] for r in rows if r.get("ttft_ms") is not None)
    valid = [r for r in rows if r["schema_valid"]]
    valid_total = sum(r["fields_total"] for r in valid)
    reasons: dict[str, int] = {}
    for r in rows:
        reasons[r["finish_reason"]] = reasons.get(r["finish_reason"], 0) + 1
    fitting = [r for r in rows if r.get("fits_budget")]
    known = any("fits_budget" in r for r in rows)  # older result files lack it
    return {
        "tasks": len(rows),
        # Tasks whose shortest instance fits max_tokens: only these can come out valid.
        "tasks_fitting_budget": len(fitting) if known else None,
        "schema_valid_rate_fitting": _rate(fitting, "schema_valid") if fitting else None,
        "json_valid_rate": _rate(rows, "json_valid"),
        "schema_valid_rate": _rate(rows, "schema_valid"),
        "sanitized_json_valid_rate": _rate(rows, "sanitized_json_valid"),
        "sanitized_schema_valid_rate": _rate(rows, "sanitized_schema_valid"),
        "field_accuracy": round(matched / total, 4) if total else 0.0,
        "field_accuracy_sanitized": round(matched_clean / total, 4) if total else 0.0,
        # Content quality where the structure came out whole: separates "wrong" from "cut off".
        "field_accuracy_schema_valid_only": round(sum(r["fields_matched"] for r in valid) / valid_total, 4)
        if valid_total else None,
        "task_accuracy_mean": round(sum(r["fields_matched"] / r["fields_total"] for r in rows) / len(rows), 4)
        if rows else 0.0,
        "exact_tasks": sum(1 for r in rows if r["fields_matched"] == r["fields_total"]),
        "fields_matched": matched, "fields_total": total,
        "mean_decode_tok_s": round(sum(speeds) / len(speeds), 2) if speeds else None,
        "ttft_ms_p50": round(ttfts[len(ttfts) // 2], 1) if ttfts else None,
        "completion_tokens": sum(r["completion_tokens"] for r in rows),
        "finish_reasons": reasons,
    }


def per_category(per_task: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Field accuracy by category and mode."""
    out: dict[str, dict[str, float]] = {}
    for cat in sorted({t["category"] for t in per_task}):
        rows = [t for t in per_task if t["category"] == cat]
        out[cat] = {}
        for mode in MODES:
            got = [t[mode] for t in rows if mode in t]
            total = sum(r["fields_total"] for r in got)
            out[cat][mode] = round(sum(r["fields_matched"] for r in got) / total, 4) if total else 0.0
    return out


def markdown_table(summary: dict[str, dict[str, Any]]) -> str:
    """Free vs constrained, one row per mode."""
    lines = ["| mode | tasks | JSON valid | schema valid | JSON valid (sanitized) | schema valid (sanitized) "
             "| field accuracy | field accuracy (sanitized) | exact tasks | finish reasons |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for mode, s in summary.items():
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(s["finish_reasons"].items()))
        lines.append(
            f"| {mode} | {s['tasks']} | {s['json_valid_rate']:.1%} | {s['schema_valid_rate']:.1%} "
            f"| {s['sanitized_json_valid_rate']:.1%} | {s['sanitized_schema_valid_rate']:.1%} "
            f"| {s['field_accuracy']:.1%} ({s['fields_matched']}/{s['fields_total']}) "
            f"| {s['field_accuracy_sanitized']:.1%} | {s['exact_tasks']}/{s['tasks']} | {reasons} |")
    for mode, s in summary.items():
        fitting, rate = s.get("tasks_fitting_budget"), s.get("schema_valid_rate_fitting")
        if fitting is not None and fitting < s["tasks"]:
            shown = "–" if rate is None else f"{rate:.1%}"
            lines.append(f"\n{mode}: {fitting} of {s['tasks']} tasks have an instance that fits max_tokens "
                         f"(the others cannot validate at this budget); schema valid among them: {shown}")
    return "\n".join(lines)


def run_one(generator: Any, prompt_ids: list[int], constraint: Any, args: argparse.Namespace,
            fast_forward: bool) -> dict[str, Any]:
    """Generate once; the text, finish reason and timings."""
    from afm_struct.decoding.generator import Finished, GenerationRequest
    from afm_struct.decoding.sampling import SamplingParams

    params = SamplingParams(temperature=args.temperature, seed=args.seed, max_tokens=args.max_tokens,
                            repetition_penalty=args.repetition_penalty)
    request = GenerationRequest(prompt_ids, params, constraint=constraint, fast_forward=fast_forward,
                                close_on_length=not getattr(args, "no_close_on_length", False))
    for event in generator.generate(request):
        if isinstance(event, Finished):
            _, dec = event.timings.rates(event.usage)
            first = event.timings.first_token_s
            return {
                "text": event.text, "finish_reason": event.reason,
                "error": event.error.message if event.error is not None else None,
                "completion_tokens": event.usage.completion_tokens,
                "forced_tokens": event.usage.forced_tokens,
                "decode_tok_s": round(dec, 2) if dec else None,
                "ttft_ms": round(first * 1e3, 1) if first is not None else None,
            }
    raise RuntimeError("the generator ended without a Finished event")


def run(args: argparse.Namespace) -> int:
    """Run every task in both modes and write the JSON report."""
    from tqdm import tqdm

    from afm_struct.decoding.generator import Generator
    from afm_struct.grammar.compiler import compile_constraint
    from afm_struct.grammar.spec import CompileOptions, JsonSchemaRequest
    from afm_struct.models import load_model

    from .environment import environment

    tasks = load_tasks(Path(args.tasks))
    modes = [m for m in MODES if m in (getattr(args, "modes", None) or ",".join(MODES)).split(",")]
    if args.limit:
        tasks = tasks[: args.limit]
    loaded = load_model(args.model)
    generator = Generator.from_loaded(loaded)
    options = CompileOptions(backend=args.backend)
    started = time.perf_counter()
    per_task: list[dict[str, Any]] = []
    for task in tqdm(tasks, desc="extract", unit="task", file=sys.stderr):
        constraint = compile_constraint(loaded.tokenizer, JsonSchemaRequest(task["schema"]), options)
        prompt_ids = loaded.tokenizer.encode_chat(build_messages(task))
        shortest = shortest_instance_tokens(loaded.tokenizer, constraint, generator.vocab_size)
        fits = shortest is not None and shortest <= args.max_tokens
        row: dict[str, Any] = {"id": task["id"], "category": task["category"],
                               "prompt_tokens": len(prompt_ids), "constraint_mode": constraint.mode.value,
                               "constraint_rung": constraint.rung.value,
                               "shortest_instance_tokens": shortest, "fits_budget": fits}
        for mode in modes:
            gen = run_one(generator, prompt_ids, constraint if mode == "constrained" else None, args,
                          fast_forward=not args.no_fast_forward)
            row[mode] = {**gen, **judge(constraint, task["expected"], gen["text"]), "fits_budget": fits}
        per_task.append(row)
    summary = {mode: summarize_mode([t[mode] for t in per_task]) for mode in modes}
    report = {
        "benchmark": "extract",
        "model": loaded.info.id,
        "settings": {"temperature": args.temperature, "seed": args.seed, "max_tokens": args.max_tokens,
                     "repetition_penalty": args.repetition_penalty,
                     "fast_forward": not args.no_fast_forward, "backend": args.backend,
                     "close_on_length": not getattr(args, "no_close_on_length", False), "modes": modes,
                     "tasks_file": str(args.tasks), "limit": args.limit, "instruction": INSTRUCTION},
        "tasks": len(per_task),
        "wall_s": round(time.perf_counter() - started, 1),
        "summary": summary,
        "per_category": per_category(per_task),
        "per_task": per_task,
        "environment": environment(),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, ensure_ascii=False))
    print(markdown_table(summary))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``bench extract``."""
    parser = sub.add_parser("extract", help="extraction accuracy and validity: free vs constrained decoding")
    parser.add_argument("--tasks", default=str(TASKS_FILE), help="task file (JSON list)")
    parser.add_argument("--limit", type=int, default=0, help="only the first N tasks (0 = all)")
    parser.add_argument("--model", default=None, help="GGUF file, mlx-lm dir or hub id (default: embedded)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--repetition-penalty", type=float, default=1.0, help="1.0 = off (both modes)")
    parser.add_argument("--backend", default="llguidance", choices=("llguidance", "outlines"),
                        help="grammar engine for the constrained mode")
    parser.add_argument("--no-fast-forward", action="store_true", help="no grammar fast-forward")
    parser.add_argument("--no-close-on-length", action="store_true",
                        help="let max_tokens cut constrained output mid-value (the old behaviour)")
    parser.add_argument("--modes", default=",".join(MODES),
                        help="comma-separated modes to run (default: free,constrained)")
    parser.add_argument("--log-level", default="warning")
    parser.add_argument("--out", required=True, help="where to write the JSON results")
    parser.set_defaults(func=run)
