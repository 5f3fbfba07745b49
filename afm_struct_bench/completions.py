"""``afm-struct bench completions``: constrained against free decoding on identical prompts,
through ``POST /v1/completions`` of a running server.

Each task (a raw prompt and a JSON schema) is sent twice per repeat: free (no constraint) and
constrained (``response_format`` json_schema, strict), greedy and with the same seed.  The raw
prompt has no chat template, so both decode from the same token prefix (checked: the two
``usage.prompt_tokens`` must agree).  Measured per mode: how often the output parses as JSON
and is valid against the schema, finish reasons, completion tokens, latency and tokens/s.  One
report: ``completions.json``, ``report.md`` and plots (validity, tokens/s) in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
import jsonschema

from .environment import environment
from .report import plot_bars
from .serve import PROMPTS, SCHEMAS

MODES = ("free", "constrained")


def tasks() -> list[tuple[str, dict[str, Any]]]:
    """The (raw prompt, schema) pairs: each prompt asks for JSON with its schema's keys."""
    out = []
    for prompt, schema in zip(PROMPTS, SCHEMAS, strict=True):
        keys = ", ".join(schema["properties"])
        out.append((f"{prompt}\nAnswer as a JSON object with the keys {keys}.\nJSON:", schema))
    return out


def verdict(text: str, schema: dict[str, Any]) -> dict[str, bool]:
    """Whether ``text`` parses as JSON, and whether that JSON is valid against ``schema``."""
    try:
        value = json.loads(text)
    except ValueError:
        return {"parses": False, "valid": False}
    return {"parses": True, "valid": jsonschema.Draft202012Validator(schema).is_valid(value)}


def one(client: httpx.Client, model: str | None, prompt: str, schema: dict[str, Any], mode: str, *,
        max_tokens: int, seed: int) -> dict[str, Any]:
    """One completion in ``mode``, timed and judged."""
    body: dict[str, Any] = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "seed": seed}
    if model:
        body["model"] = model
    if mode == "constrained":
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "task", "strict": True, "schema": schema}}
    started = time.perf_counter()
    r = client.post("/v1/completions", json=body)
    elapsed = time.perf_counter() - started
    r.raise_for_status()
    doc = r.json()
    choice, usage = doc["choices"][0], doc["usage"]
    return {"mode": mode, "text": choice["text"], "finish_reason": choice["finish_reason"],
            "prompt_tokens": usage["prompt_tokens"], "completion_tokens": usage["completion_tokens"],
            "latency_s": elapsed, "tok_s": usage["completion_tokens"] / elapsed if elapsed > 0 else None,
            "constraint_mode": r.headers.get("x-afm-constraint-mode"), **verdict(choice["text"], schema)}


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per mode: rates of parsing / valid outputs, finish reasons, median latency and tok/s."""
    out: dict[str, dict[str, Any]] = {}
    for mode in MODES:
        mine = [r for r in rows if r["mode"] == mode]
        if not mine:
            continue
        reasons: dict[str, int] = {}
        for r in mine:
            reasons[r["finish_reason"]] = reasons.get(r["finish_reason"], 0) + 1
        speeds = [r["tok_s"] for r in mine if r["tok_s"] is not None]
        out[mode] = {"n": len(mine), "parses": sum(r["parses"] for r in mine) / len(mine),
                     "valid": sum(r["valid"] for r in mine) / len(mine), "finish_reasons": reasons,
                     "median_latency_s": statistics.median(r["latency_s"] for r in mine),
                     "median_tok_s": statistics.median(speeds) if speeds else None,
                     "mean_completion_tokens": statistics.mean(r["completion_tokens"] for r in mine)}
    return out


def run_bench(url: str, *, model: str | None = None, repeats: int = 1, max_tokens: int = 64,
              seed: int = 0) -> dict[str, Any]:
    """Every task in both modes, ``repeats`` times; the rows and their summary."""
    rows: list[dict[str, Any]] = []
    with httpx.Client(base_url=url, timeout=600) as client:
        for rep in range(repeats):
            for i, (prompt, schema) in enumerate(tasks()):
                pair = [one(client, model, prompt, schema, mode, max_tokens=max_tokens, seed=seed + rep)
                        for mode in MODES]
                if pair[0]["prompt_tokens"] != pair[1]["prompt_tokens"]:
                    raise RuntimeError(f"task {i}: the two modes saw different prompts "
                                       f"({pair[0]['prompt_tokens']} vs {pair[1]['prompt_tokens']} tokens)")
                rows += [{"task": i, "repeat": rep, **r} for r in pair]
    return {"url": url, "max_tokens": max_tokens, "repeats": repeats, "rows": rows,
            "summary": summarize(rows)}


def write_report(result: dict[str, Any], out: Path) -> None:
    """``completions.json``, ``report.md`` and the two plots in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "completions.json").write_text(json.dumps(result, indent=1))
    summary = result["summary"]
    modes = [m for m in MODES if m in summary]
    plot_bars(out / "validity.png", "Outputs that parse / are schema-valid", ["parses", "valid"],
              {m: [summary[m]["parses"], summary[m]["valid"]] for m in modes}, ylabel="share", percent=True)
    plot_bars(out / "speed.png", "Median decode speed", ["tokens/s"],
              {m: [summary[m]["median_tok_s"]] for m in modes}, ylabel="tokens/s")
    lines = ["# Constrained vs free decoding through /v1/completions", "",
             f"Server {result['url']}, {len(tasks())} tasks x {result['repeats']} repeats, "
             f"max_tokens {result['max_tokens']}, greedy; both modes on the same raw prompt "
             "(equal prompt_tokens checked).", "",
             "| mode | n | parses | schema-valid | finish reasons | median latency (s) | median tok/s | "
             "mean completion tokens |", "|---|---|---|---|---|---|---|---|"]
    for m in modes:
        s = summary[m]
        speed = f"{s['median_tok_s']:.1f}" if s["median_tok_s"] is not None else "-"
        lines.append(f"| {m} | {s['n']} | {s['parses']:.0%} | {s['valid']:.0%} | "
                     f"{', '.join(f'{k} {v}' for k, v in sorted(s['finish_reasons'].items()))} | "
                     f"{s['median_latency_s']:.2f} | {speed} | {s['mean_completion_tokens']:.1f} |")
    lines += ["", "![validity](validity.png) ![speed](speed.png)", ""]
    (out / "report.md").write_text("\n".join(lines))


def run(args: argparse.Namespace) -> int:
    """The CLI entry: run against ``--url`` and write the report."""
    result = run_bench(args.url, model=args.model, repeats=args.repeats, max_tokens=args.max_tokens,
                       seed=args.seed)
    result["environment"] = environment()
    write_report(result, Path(args.out))
    for mode, s in result["summary"].items():
        print(f"{mode:12s} parses {s['parses']:.0%}  valid {s['valid']:.0%}  "
              f"median {s['median_latency_s']:.2f}s")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``bench completions``."""
    p = sub.add_parser("completions", help="constrained vs free decoding on the same raw prompts "
                                           "(/v1/completions of a running server)")
    p.add_argument("--url", default="http://127.0.0.1:9999")
    p.add_argument("--model", default=None)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    p.set_defaults(func=run)
