"""Tools sent WITHOUT ``strict`` (as the OpenAI Agents SDK and instructor's TOOLS mode send them):
how many calls have arguments that validate against the declared ``parameters``?

The same 22 JSONSchemaBench function schemas as ``strict_tools.py`` (11 Glaive, 11 BFCL), one
request each over HTTP against a running server (so a build can be compared with an older one
served from a git worktree): ``tools=[{... "parameters": schema}]`` with no ``strict`` key,
``tool_choice: "required"``, ``parallel_tool_calls: false``, greedy, ``max_tokens`` 128.

A call is *finished* when the response ends with ``finish_reason: "tool_calls"``; it is *valid*
when its arguments parse and validate against the original schema (jsonschema, the schema's own
draft, formats asserted).  The target is 100% of finished calls valid.

Usage: python benchmarks/tools/nonstrict_tools.py --url http://127.0.0.1:9999/v1 --out F.json
       python benchmarks/tools/nonstrict_tools.py --report BEFORE.json AFTER.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from strict_tools import select, tool_name


def run_one(client: Any, model: str, path: Path, max_tokens: int) -> dict[str, Any]:
    from afm_struct.grammar.validation import validate_json

    schema = json.loads(path.read_text())["schema"]
    name = tool_name(path)
    tool = {"type": "function", "function": {"name": name, "parameters": schema,
                                             "description": f"The {name.replace('_', ' ')} function."}}
    messages = [{"role": "user", "content": f"Call {name} with realistic example arguments."}]
    t0 = time.perf_counter()
    resp = client.chat.completions.create(model=model, messages=messages, tools=[tool],
                                          tool_choice="required", parallel_tool_calls=False,
                                          temperature=0, max_tokens=max_tokens)
    choice = resp.choices[0]
    calls = choice.message.tool_calls or []
    args = calls[0].function.arguments if calls else None
    outcome = validate_json(args, schema, require_object=True) if args is not None else None
    return {"file": path.name, "tool": name, "finish": choice.finish_reason, "call": bool(calls),
            "finished": choice.finish_reason == "tool_calls",
            "valid": bool(outcome and outcome.ok),
            "errors": list(outcome.errors[:2]) if outcome else ["no call"],
            "arguments": args, "tokens": resp.usage.completion_tokens if resp.usage else None,
            "seconds": round(time.perf_counter() - t0, 2)}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    finished = [r for r in rows if r["finished"]]
    return {"schemas": len(rows), "calls": sum(r["call"] for r in rows),
            "finished": len(finished), "valid": sum(r["valid"] for r in rows),
            "valid_finished": sum(r["valid"] for r in finished),
            "valid_share_of_finished": round(sum(r["valid"] for r in finished) / len(finished), 3)
            if finished else None}


def report(paths: list[str]) -> str:
    results = [json.loads(Path(p).read_text()) for p in paths]
    head = "| schema file | " + " | ".join(r.get("label", Path(p).stem) for r, p in zip(results, paths,
                                                                                          strict=True)) + " |"
    lines = [head, "|---|" + "---|" * len(results)]
    for i, row in enumerate(results[0]["rows"]):
        cells = []
        for r in results:
            x = r["rows"][i]
            verdict = "valid" if x["valid"] else "no call" if not x["call"] else "invalid"
            cells.append(f"{verdict} ({x['finish']}, {x['tokens']} tok)")
        lines.append(f"| {row['file']} | " + " | ".join(cells) + " |")
    lines += ["", "| run | calls | finished (tool_calls) | valid | valid of finished |",
              "|---|---|---|---|---|"]
    for r, p in zip(results, paths, strict=True):
        s = r["summary"]
        share = "–" if s["valid_share_of_finished"] is None else f"{s['valid_share_of_finished']:.0%}"
        lines.append(f"| {r.get('label', Path(p).stem)} | {s['calls']}/{s['schemas']} | {s['finished']} | "
                     f"{s['valid']} | {s['valid_finished']}/{s['finished']} ({share}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:9999/v1")
    parser.add_argument("--n", type=int, default=22)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--label", default=None, help="the run's name in the report (e.g. the commit)")
    parser.add_argument("--out", default="benchmarks/tools/nonstrict_tools.json")
    parser.add_argument("--report", nargs="+", metavar="JSON", help="print the table of these runs")
    args = parser.parse_args(argv)
    if args.report:
        print(report(args.report))
        return 0
    import openai

    client = openai.OpenAI(base_url=args.url, api_key="none", timeout=600)
    model = client.models.list().data[0].id
    rows: list[dict[str, Any]] = []
    for path in select(args.n):
        row = run_one(client, model, path, args.max_tokens)
        rows.append(row)
        print(f"{row['tool']:<40} call={row['call']!s:<5} valid={row['valid']!s:<5} {row['finish']:<10} "
              f"{row['tokens']} tok  {row['errors'][0] if not row['valid'] else ''}"[:200],
              file=sys.stderr, flush=True)
        result = {"label": args.label or args.url, "max_tokens": args.max_tokens, "tool_choice": "required",
                  "summary": summarize(rows), "rows": rows}
        Path(args.out).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps(summarize(rows), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
