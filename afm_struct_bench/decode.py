"""``afm-struct bench decode``: free against constrained decoding, same model, prompts and seeds.

Modes: ``free`` (no mask; the prompt asks for JSON), ``constrained`` (mask, fast-forward off)
and ``constrained_ff`` (mask and fast-forward).  Speed is output tokens per wall second of the
decode phase (first sampled token to the end; prefill is the same for every mode and reported
separately as TTFT), median over tasks × repeats.  Each engine gets the constrained modes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from .environment import environment

if TYPE_CHECKING:
    from afm_struct.models.tokenizer import Tokenizer

MODES = ("free", "constrained", "constrained_ff")
INSTRUCTION = ("Answer with only a JSON object that follows this JSON Schema, no prose:\n{schema}\n\n"
               "{prompt}")


def default_tasks() -> list[dict[str, Any]]:
    """The built-in schema-heavy tasks (objects with several fixed keys)."""
    text = resources.files("afm_struct_bench").joinpath("data/decode_tasks.json").read_text()
    return json.loads(text)


def tasks_from_dir(folder: Path, limit: int | None) -> list[dict[str, Any]]:
    """Tasks made from MaskBench files: 'generate an instance of this schema'."""
    tasks = []
    for path in sorted(folder.glob("*.json"))[: limit or None]:
        data = json.loads(path.read_text())
        tasks.append({"id": path.stem, "schema": data["schema"],
                      "prompt": "Generate a realistic example instance."})
    return tasks


def _valid_json(text: str) -> tuple[bool, Any]:
    try:
        return True, json.loads(text)
    except ValueError:
        return False, None


def run_one(generator: Any, tokenizer: Tokenizer, task: dict[str, Any], constraint: Any, *, mode: str,
            seed: int, max_tokens: int, repetition_penalty: float = 1.0) -> dict[str, Any]:
    """One generation; returns speed, TTFT and validity."""
    import jsonschema

    from afm_struct.decoding.generator import Finished, GenerationRequest
    from afm_struct.decoding.sampling import SamplingParams

    prompt = INSTRUCTION.format(schema=json.dumps(task["schema"]), prompt=task["prompt"])
    ids = tokenizer.encode_chat([{"role": "user", "content": prompt}])
    request = GenerationRequest(
        ids, SamplingParams(temperature=0.0, seed=seed, max_tokens=max_tokens,
                            repetition_penalty=repetition_penalty),
        constraint=None if mode == "free" else constraint, fast_forward=mode == "constrained_ff")
    start = time.perf_counter()
    fin = next(e for e in generator.generate(request) if isinstance(e, Finished))
    wall = time.perf_counter() - start
    ok_json, value = _valid_json(fin.text)
    ok_schema = False
    if ok_json:
        try:
            jsonschema.validate(value, task["schema"])
            ok_schema = fin.reason == "stop"
        except jsonschema.ValidationError:
            ok_schema = False
    return {
        "task": task["id"], "mode": mode, "seed": seed, "finish_reason": fin.reason,
        "completion_tokens": fin.usage.completion_tokens, "forced_tokens": fin.usage.forced_tokens,
        "decode_s": fin.timings.decode_s, "prefill_s": fin.timings.prefill_s, "wall_s": wall,
        "tok_s": fin.usage.completion_tokens / fin.timings.decode_s if fin.timings.decode_s else None,
        "ttft_ms": (fin.timings.first_token_s or 0.0) * 1000, "mask_ms": fin.timings.mask_s * 1000,
        "valid_json": ok_json and fin.reason == "stop", "schema_valid": ok_schema, "text": fin.text,
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians and rates per mode."""
    out: dict[str, Any] = {"tok_s": {}, "ttft_ms": {}, "valid_json_rate": {}, "schema_valid_rate": {},
                           "completion_tokens": {}, "forced_share": {}}
    for mode in MODES:
        sel = [r for r in rows if r["mode"] == mode]
        if not sel:
            continue
        out["tok_s"][mode] = statistics.median(r["tok_s"] for r in sel if r["tok_s"])
        out["ttft_ms"][mode] = statistics.median(r["ttft_ms"] for r in sel)
        out["valid_json_rate"][mode] = sum(r["valid_json"] for r in sel) / len(sel)
        out["schema_valid_rate"][mode] = sum(r["schema_valid"] for r in sel) / len(sel)
        out["completion_tokens"][mode] = statistics.median(r["completion_tokens"] for r in sel)
        total = sum(r["completion_tokens"] for r in sel)
        out["forced_share"][mode] = sum(r["forced_tokens"] for r in sel) / total if total else 0.0
    return out


def markdown(result: dict[str, Any]) -> str:
    """The summary table."""
    lines = ["| engine | mode | tok/s (median) | vs free | TTFT ms | valid JSON | schema valid "
             "| forced share |", "|---|---|---|---|---|---|---|---|"]
    free = result["free_tok_s"]
    for engine, summary in result["per_engine"].items():
        for mode in MODES:
            if mode not in summary["tok_s"]:
                continue
            tps = summary["tok_s"][mode]
            lines.append(
                f"| {engine} | {mode} | {tps:.1f} | {tps / free:.2f}x | {summary['ttft_ms'][mode]:.0f} | "
                f"{summary['valid_json_rate'][mode]:.2f} | {summary['schema_valid_rate'][mode]:.2f} | "
                f"{summary['forced_share'][mode]:.2f} |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Run every task in every mode and engine; write JSON, print Markdown."""
    from afm_struct.decoding.generator import Generator
    from afm_struct.grammar.compiler import compile_constraint
    from afm_struct.grammar.spec import CompileOptions, JsonSchemaRequest
    from afm_struct.models import load_model

    loaded = load_model(args.model)
    tokenizer = loaded.tokenizer
    tasks = tasks_from_dir(Path(args.schemas), args.limit) if args.schemas else default_tasks()
    tasks = tasks[: args.limit] if args.limit else tasks
    generator = Generator.from_loaded(loaded)
    generator.overlap = not args.no_overlap
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    plan = []
    for engine in engines:
        for task in tasks:
            c = compile_constraint(tokenizer, JsonSchemaRequest(task["schema"]),
                                   CompileOptions(backend=engine,  # type: ignore[arg-type]
                                                  property_order=args.property_order))
            modes = MODES if engine == engines[0] else MODES[1:]
            plan.extend((engine, task, c, mode, rep) for mode in modes for rep in range(args.repeats))
    # Warm-up: first calls pay one-off costs (graph compile, allocator growth).
    run_one(generator, tokenizer, tasks[0], plan[0][2], mode="constrained_ff", seed=args.seed, max_tokens=16)
    rows = []
    for engine, task, constraint, mode, rep in tqdm(plan, desc="decode", unit="gen", file=sys.stderr):
        row = run_one(generator, tokenizer, task, constraint, mode=mode, seed=args.seed + rep,
                      max_tokens=args.max_tokens, repetition_penalty=args.repetition_penalty)
        row.update(engine=engine, constraint_mode=str(constraint.mode))
        rows.append(row)
    per_engine = {}
    free_rows = [r for r in rows if r["mode"] == "free"]
    for engine in engines:
        per_engine[engine] = summarize(free_rows + [r for r in rows if r["engine"] == engine
                                                    and r["mode"] != "free"])
    main = per_engine[engines[0]]
    result = {
        "model": loaded.info.id, "weights": loaded.info.weights, "engines": engines,
        "overlap": generator.overlap, "max_tokens": args.max_tokens, "seed": args.seed,
        "repeats": args.repeats, "repetition_penalty": args.repetition_penalty,
        "property_order": args.property_order,
        "free_tok_s": main["tok_s"]["free"],
        "constrained_tok_s": main["tok_s"]["constrained"],
        "constrained_ff_tok_s": main["tok_s"]["constrained_ff"],
        "ratios": {"constrained_vs_free": main["tok_s"]["constrained"] / main["tok_s"]["free"],
                   "constrained_ff_vs_free": main["tok_s"]["constrained_ff"] / main["tok_s"]["free"]},
        "ttft_ms": main["ttft_ms"], "valid_json_rate": main["valid_json_rate"],
        "schema_valid_rate": main["schema_valid_rate"], "per_engine": per_engine,
        "tasks": [{"id": t["id"], "prompt": t["prompt"], "schema": t["schema"]} for t in tasks],
        "rows": rows, "environment": environment(),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(markdown(result))
    print(f"\nconstrained/free = {result['ratios']['constrained_vs_free']:.2f}x, "
          f"constrained_ff/free = {result['ratios']['constrained_ff_vs_free']:.2f}x -> {args.out}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``bench decode``."""
    p = sub.add_parser("decode", help="free vs constrained decoding speed and validity")
    p.add_argument("--model", default=None)
    p.add_argument("--schemas", default=None, help="a MaskBench-format folder instead of the built-in tasks")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--engines", default="llguidance", help="comma-separated: llguidance,outlines")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-tokens", type=int, default=160)
    # Greedy decoding of a 135M model loops ("SalesSalesSales..."); a mild penalty, the same
    # for every mode, lets outputs finish so validity is measured on complete objects.
    p.add_argument("--repetition-penalty", type=float, default=1.1)
    p.add_argument("--no-overlap", action="store_true", help="serialize mask filling and the forward pass")
    p.add_argument("--property-order", default="schema", choices=("schema", "any"),
                   help="objects' properties in the schema's order (default) or in any order")
    p.add_argument("--out", required=True)
    p.set_defaults(func=run)
