"""Strict tools vs free text: the share of tool calls whose arguments validate, embedded model.

For N function schemas from JSONSchemaBench (``Glaiveai2K`` and ``BFCL_*`` files; the file's
``schema`` is the function's ``parameters``, the tool is named after the file), one request each:

* ``strict``: ``strict: true``, ``tool_choice: "required"`` → the plan's grammar (enforced or
  downgraded, as the ladder decides);
* ``free``: ``strict: false``, ``tool_choice: "required"``, unconstrained: the system prompt
  asks for the call, the router parses whatever the model writes.

A request counts as valid when it made a call whose arguments validate against the schema
(jsonschema, formats checked).  Greedy decoding; same prompt and budget for both.

Usage: python benchmarks/tools/strict_tools.py [--n 22] [--max-tokens 128]
           [--out benchmarks/tools/strict_tools.json]      (then --report for the Markdown table)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

DATA = Path("/work/shared/jsonschemabench/data")
BFCL_KINDS = ("simple", "multiple", "parallel", "parallel_multiple", "java", "javascript", "sql")


def tool_name(path: Path) -> str:
    """``Glaiveai2K---get_weather_1a2b3c4d.json`` → ``get_weather``; ``BFCL_simple_10`` as is."""
    stem = path.stem
    if stem.startswith("Glaiveai2K---"):
        stem = re.sub(r"_[0-9a-f]{8}$", "", stem.split("---", 1)[1])
    return re.sub(r"[^A-Za-z0-9_-]", "_", stem)[:64]


def select(n: int) -> list[Path]:
    """Half Glaive (distinct function names), half BFCL (round-robin over kinds), sorted, fixed."""
    glaive: dict[str, Path] = {}
    for p in sorted(DATA.glob("Glaiveai2K---*.json")):
        glaive.setdefault(tool_name(p), p)
    by_kind = {k: sorted((p for p in DATA.glob(f"BFCL_{k}_*.json")
                          if re.fullmatch(rf"BFCL_{k}_\d+", p.stem)),
                         key=lambda p: int(p.stem.rsplit("_", 1)[1]))
               for k in BFCL_KINDS}
    bfcl: list[Path] = []
    while len(bfcl) < n - n // 2 and any(by_kind.values()):
        for k in BFCL_KINDS:
            if by_kind[k] and len(bfcl) < n - n // 2:
                bfcl.append(by_kind[k].pop(0))
    return list(glaive.values())[: n // 2] + bfcl


def run_one(loaded: Any, path: Path, *, strict: bool, max_tokens: int) -> dict[str, Any]:
    from afm_struct.decoding.generator import Finished, GenerationRequest, Generator, TextDelta
    from afm_struct.decoding.sampling import SamplingParams
    from afm_struct.tools import plan_tools

    schema = json.loads(path.read_text())["schema"]
    name = tool_name(path)
    tool = {"type": "function", "function": {"name": name, "strict": strict, "parameters": schema,
                                             "description": f"The {name.replace('_', ' ')} function."}}
    messages = [{"role": "user", "content": f"Call {name} with realistic example arguments."}]
    t0 = time.perf_counter()
    plan = plan_tools(loaded.tokenizer, [tool], "required", False, messages=messages,
                      constrain_non_strict=False)
    compile_s = time.perf_counter() - t0
    router = plan.make_router()
    request = GenerationRequest(prompt_ids=plan.encode_prompt(loaded.tokenizer),
                                params=SamplingParams(max_tokens=max_tokens, temperature=0.0),
                                constraint=plan.constraint)
    finished: Finished | None = None
    for ev in Generator.from_loaded(loaded).generate(request):
        if isinstance(ev, TextDelta):
            router.feed(ev.text)
        else:
            finished = ev
            router.finish()
    assert finished is not None
    calls = router.calls
    outcome = plan.validate_call(calls[0]["function"]["name"], calls[0]["function"]["arguments"]) \
        if calls else None
    # A call cut by max_tokens is incomplete even if closing its brackets happens to validate.
    close = plan.format.close
    complete = bool(calls) and (finished.reason != "length" or bool(close and close in finished.text))
    loose = lenient_arguments(finished.text, name)
    return {
        "file": path.name, "tool": name, "strict": strict,
        "constrained": plan.constraint is not None,
        "mode": ("downgraded" if plan.downgraded else "enforced") if plan.constraint else "free",
        "reason": plan.reason, "call": bool(calls), "complete": complete,
        "valid": bool(outcome and outcome.ok and complete),
        "valid_if_closed": bool(outcome and outcome.ok),
        "valid_lenient": loose is not None and plan.validate_call(name, json.dumps(loose)).ok,
        "errors": list(outcome.errors[:2]) if outcome else ["no call"],
        "finish": finished.reason, "tokens": finished.usage.completion_tokens,
        "compile_s": round(compile_s, 3), "gen_s": round(finished.timings.decode_s, 2),
        "text": finished.text,
    }


def lenient_arguments(text: str, name: str) -> Any:
    """Arguments of the first JSON object anywhere in ``text`` that names ``name`` and carries
    ``arguments``/``parameters`` (fenced or bare, no tags): the most a lenient reader could get."""
    decoder = json.JSONDecoder()
    for i, ch in enumerate(text):
        if ch != "{":
            continue
        try:
            value, _ = decoder.raw_decode(text, i)
        except ValueError:
            continue
        if isinstance(value, dict) and value.get("name") == name:
            for key in ("arguments", "parameters"):
                if key in value:
                    return value[key]
    return None


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def share(items: list[dict[str, Any]], key: str) -> float | None:
        return round(sum(r[key] for r in items) / len(items), 3) if items else None

    strict = [r for r in rows if r["strict"]]
    free = [r for r in rows if not r["strict"]]
    enforced = [r for r in strict if r["mode"] == "enforced"]
    return {
        "schemas": len(strict),
        "valid_lenient": {"strict": share(strict, "valid_lenient"), "free": share(free, "valid_lenient")},
        "strict_required": {"valid": share(strict, "valid"), "call": share(strict, "call"),
                            "valid_if_closed": share(strict, "valid_if_closed"),
                            "valid_not_cut": share([r for r in strict if r["finish"] != "length"], "valid"),
                            "enforced_tools": len(enforced), "valid_enforced": share(enforced, "valid"),
                            "downgraded_tools": len(strict) - len(enforced),
                            "length_cut": sum(r["finish"] == "length" for r in strict)},
        "free_required": {"valid": share(free, "valid"), "call": share(free, "call"),
                          "valid_not_cut": share([r for r in free if r["finish"] != "length"], "valid"),
                          "length_cut": sum(r["finish"] == "length" for r in free)},
    }


def markdown(result: dict[str, Any]) -> str:
    """The README table: one row per schema, then the totals."""
    by_tool: dict[str, dict[bool, dict[str, Any]]] = {}
    for r in result["rows"]:
        by_tool.setdefault(r["file"], {})[r["strict"]] = r

    def cell(r: dict[str, Any] | None) -> str:
        if r is None:
            return "–"
        verdict = ("valid" if r["valid"] else "no call" if not r["call"]
                   else "cut short" if not r.get("complete", True) else "invalid")
        return f"{verdict} ({r['finish']}, {r['tokens']} tok)"

    lines = ["| schema file | strict: mode | strict + required | free + required |",
             "|---|---|---|---|"]
    for name, pair in by_tool.items():
        s, f = pair.get(True), pair.get(False)
        mode = (s["mode"] + (f" ({s['reason']})" if s and s["reason"] else "")) if s else "–"
        lines.append(f"| {name} | {mode} | {cell(s)} | {cell(f)} |")
    sm = result["summary"]
    st, fr = sm["strict_required"], sm["free_required"]

    def pct(x: float | None) -> str:
        return "–" if x is None else f"{x:.0%}"

    lines += ["", "| condition | schemas | calls made | arguments valid | valid when not cut by max_tokens |",
              "|---|---|---|---|---|"]
    for label, part in (("strict: true, required (grammar)", st),
                        ("strict: false, required, unconstrained (asked in the prompt)", fr)):
        lines.append(f"| {label} | {sm['schemas']} | {pct(part['call'])} | {pct(part['valid'])} | "
                     f"{pct(part['valid_not_cut'])} |")
    lines += ["", f"Enforced strict tools: {st['enforced_tools']} of {sm['schemas']}, "
              f"{pct(st['valid_enforced'])} of them with complete valid calls; {st['length_cut']} strict "
              f"and {fr['length_cut']} free runs stopped at max_tokens={result['max_tokens']}; strict "
              f"calls valid once their brackets are closed: {pct(st.get('valid_if_closed'))}.",
              f"Lenient reading of the free runs (any JSON object in the text naming the tool, with "
              f"arguments/parameters, tags or not): {pct(sm.get('valid_lenient', {}).get('free'))} valid."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=22)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--out", default="benchmarks/tools/strict_tools.json")
    parser.add_argument("--report", action="store_true", help="print the Markdown table of --out")
    args = parser.parse_args(argv)
    if args.report:
        print(markdown(json.loads(Path(args.out).read_text())))
        return 0

    from afm_struct.decoding.generator import Generator  # noqa: F401  (import MLX early)
    from afm_struct.models import load_model

    loaded = load_model()
    rows: list[dict[str, Any]] = []
    paths = select(args.n)
    for path in paths:
        for strict in (True, False):
            row = run_one(loaded, path, strict=strict, max_tokens=args.max_tokens)
            rows.append(row)
            print(f"{row['tool']:<40} {'strict' if strict else 'free  '} {row['mode']:<10} "
                  f"call={row['call']!s:<5} valid={row['valid']!s:<5} {row['finish']:<6} "
                  f"{row['tokens']:>4} tok", file=sys.stderr, flush=True)
        # Written after every schema: a long run leaves usable partial results.
        result = {"model": loaded.info.id, "max_tokens": args.max_tokens, "tool_choice": "required",
                  "complete": len(rows) == 2 * len(paths), "summary": summarize(rows), "rows": rows}
        Path(args.out).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps(result["summary"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
