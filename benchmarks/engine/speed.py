"""Prefill and decode tok/s of afm-struct's generator against ``mlx_lm.stream_generate``.

Same weights (the model object afm-struct loaded), same prompt, greedy, median of N runs.
Usage: python benchmarks/engine/speed.py [--runs 5] [--max-tokens 128] [--weights auto]
Run it with and without an optimized BLAS preloaded (see README.md beside this file).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

PROMPT = ("Write a detailed paragraph about the history of the Eiffel Tower, its construction, "
          "its designer and how Parisians first reacted to it. " * 3)


def afm_run(loaded, ids, max_tokens):
    from afm_struct.decoding.generator import Finished, GenerationRequest, Generator
    from afm_struct.decoding.sampling import SamplingParams

    gen = Generator.from_loaded(loaded)
    # Greedy with EOS disabled by a huge budget is not possible; keep runs equal by counting.
    for ev in gen.generate(GenerationRequest(ids, SamplingParams(temperature=0, max_tokens=max_tokens))):
        if isinstance(ev, Finished):
            pre, dec = ev.timings.rates(ev.usage)
            return pre, dec, ev.usage.completion_tokens


def mlx_lm_run(loaded, ids, max_tokens):
    from mlx_lm import stream_generate
    from mlx_lm.sample_utils import make_sampler
    from mlx_lm.tokenizer_utils import TokenizerWrapper

    wrapper = TokenizerWrapper(loaded.tokenizer.hf, eos_token_ids=set(loaded.tokenizer.eos_token_ids))
    responses = list(stream_generate(loaded.model, wrapper, ids, max_tokens=max_tokens,
                                     sampler=make_sampler(temp=0.0)))
    last = responses[-1]
    return last.prompt_tps, last.generation_tps, last.generation_tokens


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--weights", default="auto")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    from afm_struct.models import load_model
    from afm_struct.models.blas import blas_in_use

    loaded = load_model(weights=args.weights)
    ids = loaded.tokenizer.encode_chat([{"role": "user", "content": PROMPT}])
    afm_run(loaded, ids, 8)  # warm-up both paths
    mlx_lm_run(loaded, ids, 8)
    rows = {"afm_struct": [], "mlx_lm": []}
    for _ in range(args.runs):  # interleave so drift hits both equally
        rows["afm_struct"].append(afm_run(loaded, ids, args.max_tokens))
        rows["mlx_lm"].append(mlx_lm_run(loaded, ids, args.max_tokens))
    result = {
        "blas": blas_in_use(), "weights": loaded.info.weights, "device": loaded.info.device,
        "prompt_tokens": len(ids), "max_tokens": args.max_tokens, "runs": args.runs,
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    for name, r in rows.items():
        result[name] = {"prefill_tok_s": statistics.median(x[0] for x in r),
                        "decode_tok_s": statistics.median(x[1] for x in r),
                        "tokens": [x[2] for x in r]}
    print(json.dumps(result, indent=2))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
