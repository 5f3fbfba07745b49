"""Shortest completions from random cut points of dev-set instances: found, valid, and their cost.

For N random cases (seeded): a JSONSchemaBench dev-set schema compiled strict and served
enforced, one of its valid instances, tokenized (embedded tokenizer) and cut after a random
token; the closing search (``afm_struct.grammar.closer.completion.shortest_completion``) completes the cut
text, and the result is judged by the compiled constraint's ``validate`` (the original schema,
formats asserted).  Counts: found and valid, found but invalid, not found; search time p50 /
p90 / p99 / max (cold: most schemas are seen once, so pattern automata are built inside).

    PYTHONPATH=<tree> python benchmarks/closing/completions.py --n 1000 --seed 7 --out FILE.json
"""

from __future__ import annotations

import argparse
import inspect
import json
import random
import time
from pathlib import Path


def dev_set() -> Path:
    """The shared dev set, found above this file (worktrees live one level deeper)."""
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "shared" / "jsonschemabench" / "data"
        if candidate.is_dir():
            return candidate
    raise SystemExit("no shared/jsonschemabench/data above this file")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    import afm_struct
    from afm_struct.errors import AfmError
    from afm_struct.grammar.closer import completion as closing
    from afm_struct.grammar.compiler import compile_constraint
    from afm_struct.grammar.spec import JsonSchemaRequest
    from afm_struct.models import load_tokenizer

    tok = load_tokenizer()
    vocab = closing.closing_vocab_for(tok)
    takes_content = "content" in inspect.signature(closing.shortest_completion).parameters
    files = sorted(dev_set().glob("*.json"))
    rng = random.Random(args.seed)
    counts = {"cases": 0, "valid": 0, "invalid": 0, "not_found": 0}
    times: list[float] = []
    failures: list[dict[str, str]] = []
    while counts["cases"] < args.n:
        path = rng.choice(files)
        doc = json.loads(path.read_text())
        try:
            constraint = compile_constraint(tok, JsonSchemaRequest(doc["schema"], strict=True))
        except (AfmError, ValueError):
            continue
        valid = [t["data"] for t in doc.get("tests", []) if t.get("valid")]
        if constraint.mode != "enforced" or not valid:
            continue
        ids = tok.encode(json.dumps(rng.choice(valid), ensure_ascii=False))
        matcher = constraint.new_matcher()
        cut = rng.randint(0, len(ids))
        if not all(matcher.advance(t) for t in ids[:cut]) or matcher.is_accepting():
            continue
        counts["cases"] += 1
        text = tok.decode(ids[:cut])
        extra = {"content": closing.open_string(text)} if takes_content else {}
        t0 = time.perf_counter()
        plan = closing.shortest_completion(matcher, vocab, vocab_size=tok.vocab_size, decode=tok.decode,
                                           state=closing.scan(text), **extra)
        times.append(time.perf_counter() - t0)
        if plan is None:
            counts["not_found"] += 1
            failures.append({"file": path.name, "why": "not found", "text": text[-80:]})
        elif constraint.validate(text + tok.decode(plan)).ok:
            counts["valid"] += 1
        else:
            counts["invalid"] += 1
            failures.append({"file": path.name, "why": "invalid", "text": (text + tok.decode(plan))[-80:]})
    times.sort()

    def pct(q: float) -> float:
        return round(1000 * times[min(len(times) - 1, int(q * len(times)))], 2)

    report = {"tree": str(Path(afm_struct.__file__).parents[1]), "n": args.n, "seed": args.seed, **counts,
              "ms": {"p50": pct(0.5), "p90": pct(0.9), "p99": pct(0.99), "max": round(1000 * times[-1], 1)},
              "failures": failures[:40]}
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "failures"}))


if __name__ == "__main__":
    main()
