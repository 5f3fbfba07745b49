"""Outputs cut by max_tokens on dev-set schemas: how many parse, validate, or say why not.

For N random (schema, budget, seed) triples (seeded): a JSONSchemaBench dev-set schema
(/work/shared/jsonschemabench/data), compiled strict; a random ``max_tokens`` in [1, 150]; a
generation on the random-logits model (``afm_struct.testing.RandomModel``, temperature 1) with
the embedded tokenizer and budget-aware closing on.  Each output that ends at ``length`` is
judged by the compiled constraint's ``validate`` (the original schema, formats asserted) and
counted as: valid, invalid but parses, unparseable; and, of those not valid, how many the
request flags (the downgrade header: strict schema served best-effort; or refused before
generating because the budget is below the shortest valid output, where the engine has
``min_output_tokens``).

    PYTHONPATH=<tree> python benchmarks/closing/cut_outputs.py --n 400 --seed 0 --out FILE.json

Run it with PYTHONPATH on a tree before and after a change to compare (the script only uses
APIs both sides have, and looks up the refusal check if present).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any


def dev_set() -> Path:
    """The shared dev set, found above this file (worktrees live one level deeper)."""
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "shared" / "jsonschemabench" / "data"
        if candidate.is_dir():
            return candidate
    sys.exit("no shared/jsonschemabench/data above this file")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-budget", type=int, default=150)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    import afm_struct
    from afm_struct.decoding.generator import Finished, GenerationRequest, Generator
    from afm_struct.decoding.sampling import SamplingParams
    from afm_struct.errors import AfmError
    from afm_struct.grammar.compiler import compile_constraint
    from afm_struct.grammar.spec import JsonSchemaRequest
    from afm_struct.models import load_tokenizer
    from afm_struct.testing import random_loaded_model

    try:  # the admission check, where the tree has one
        from afm_struct.decoding.length_close import check_budget
    except ImportError:
        check_budget = None

    tok = load_tokenizer()
    files = sorted(dev_set().glob("*.json"))
    rng = random.Random(args.seed)
    prompt = tok.encode_chat([{"role": "user", "content": "JSON please"}])
    counts: Counter[str] = Counter()
    examples: dict[str, list[Any]] = {}
    t0 = time.perf_counter()
    done = 0
    while done < args.n:
        path = rng.choice(files)
        budget = rng.randint(1, args.max_budget)
        seed = rng.randrange(1 << 30)
        try:
            schema = json.loads(path.read_text())["schema"]
            constraint = compile_constraint(tok, JsonSchemaRequest(schema, strict=True))
        except (AfmError, ValueError):
            continue
        done += 1
        if constraint.new_matcher() is None:
            counts["unconstrained"] += 1
            continue
        if check_budget is not None:
            try:
                check_budget(constraint, tok, budget, param="max_tokens")
            except AfmError:
                counts["refused"] += 1
                continue
        gen = Generator.from_loaded(random_loaded_model(tok, seed))
        params = SamplingParams(temperature=1.0, seed=seed, max_tokens=budget)
        fin = list(gen.generate(GenerationRequest(prompt, params, constraint=constraint)))[-1]
        assert isinstance(fin, Finished)
        counts[f"finish_{fin.reason.value}"] += 1
        if fin.reason.value != "length":
            continue
        outcome = constraint.validate(fin.text)
        try:
            json.loads(fin.text)
            parses = True
        except ValueError:
            parses = False
        kind = "valid" if outcome.ok else ("invalid_parses" if parses else "unparseable")
        counts[f"length_{kind}"] += 1
        if kind != "valid":
            flagged = constraint.flag_downgraded
            counts[f"length_{kind}_{'flagged' if flagged else 'unflagged'}"] += 1
            examples.setdefault(kind, [])
            if len(examples[kind]) < 12:
                examples[kind].append({"file": path.name, "budget": budget, "seed": seed,
                                       "flagged": flagged, "text": fin.text[-160:]})
    report = {"tree": str(Path(afm_struct.__file__).parents[1]), "n": args.n, "seed": args.seed,
              "max_budget": args.max_budget, "seconds": round(time.perf_counter() - t0, 1),
              "counts": dict(sorted(counts.items())), "examples": examples}
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(json.dumps({k: report[k] for k in ("tree", "n", "seconds", "counts")}, indent=1))


if __name__ == "__main__":
    main()
