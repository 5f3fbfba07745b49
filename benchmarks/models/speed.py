"""Decode speed of mlx-lm directories: afm-struct's default flags vs ``--weights float32`` vs
``mlx_lm`` (``stream_generate``) on the stored weights and on the weights afm-struct chose.

A random-weight qwen3 (hidden 512, 8 layers, Qwen3's real 151k vocabulary) is written in bf16
and 4-bit affine by mlx-lm's own ``save_model`` / ``quantize_model`` (tests/models/mlx_dir_factory.py);
each configuration decodes the same chat prompt greedily, in rounds (every configuration once per
round, back to back, so a shared machine's load hits them alike); the median decode tok/s of
the rounds is reported.

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 \\
        .venv/bin/python benchmarks/models/speed.py --rounds 3 --out benchmarks/models/speed.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import afm_struct  # noqa: F401  # first: it selects the optimized BLAS before MLX loads

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
PROMPT = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]


def afm_decode(path: Path, weights: str, tokens: int) -> Callable[[], float]:
    """A run of afm-struct's engine (the generator the server uses) on ``path`` loaded with
    ``--weights weights``: returns its decode tok/s."""
    from afm_struct.decoding.generator import Finished, GenerationRequest, Generator
    from afm_struct.decoding.sampling import SamplingParams
    from afm_struct.models.loader import load_model

    loaded = load_model(str(path), weights=weights)
    print(f"  afm {path.name} --weights {weights}: {loaded.info.weights} ({loaded.info.weights_reason})",
          file=sys.stderr)
    generator = Generator.from_loaded(loaded)
    prompt = loaded.tokenizer.encode_chat(PROMPT)

    def run() -> float:
        request = GenerationRequest(prompt, SamplingParams(temperature=0.0, max_tokens=tokens))
        for event in generator.generate(request):
            if isinstance(event, Finished):
                return event.timings.rates(event.usage)[1] or 0.0
        raise RuntimeError("no Finished event")

    return run


def mlx_lm_decode(path: Path, dequantized: bool, tokens: int) -> Callable[[], float]:
    """A run of ``mlx_lm.stream_generate`` on ``path`` as stored, or on the weights afm-struct's
    ``auto`` chose here (dequantized to fp32): returns mlx-lm's own generation tok/s."""
    import mlx.core as mx
    import mlx_lm

    from afm_struct.models import weights

    model, tokenizer = mlx_lm.load(str(path))
    if dequantized:
        weights.dequantize(model, mx.float32)
        model.set_dtype(mx.float32)
    prompt = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True)

    def run() -> float:
        last = None
        for response in mlx_lm.stream_generate(model, tokenizer, prompt, max_tokens=tokens):
            last = response
        assert last is not None
        return last.generation_tps

    return run


def main(argv: list[str] | None = None) -> int:
    """Build the directories, run the rounds, print a markdown table, write JSON."""
    from tests.models import mlx_dir_factory as factory

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tokens", type=int, default=32, help="tokens decoded per run")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--kinds", default="bf16,4-bit", help="which directories: bf16, 4-bit or both")
    p.add_argument("--skip", default="", help="leave out configurations whose name holds this text")
    args = p.parse_args(argv)
    results: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind, bits in (("bf16", None), ("4-bit", 4)):
            if kind not in args.kinds.split(","):
                continue
            path = factory.build("qwen3", Path(tmp) / f"qwen3-512x8-{kind}", bits=bits, hidden=512, layers=8)
            configs = {
                "afm-struct default (auto)": afm_decode(path, "auto", args.tokens),
                "afm-struct --weights float32": afm_decode(path, "float32", args.tokens),
                "mlx_lm, stored weights": mlx_lm_decode(path, False, args.tokens),
                "mlx_lm, afm-struct's chosen weights (fp32)": mlx_lm_decode(path, True, args.tokens),
            }
            if args.skip:
                configs = {name: run for name, run in configs.items() if args.skip not in name}
            for run in configs.values():
                run()  # warm-up: first-call compilation and page faults
            rates: dict[str, list[float]] = {name: [] for name in configs}
            for r in range(args.rounds):
                # Each round starts one configuration later, so no configuration always runs
                # first (or right after the slow stored-weights one).
                names = list(configs)
                for name in names[r % len(names):] + names[:r % len(names)]:
                    run = configs[name]
                    start = time.perf_counter()
                    rates[name].append(run())
                    print(f"  {kind} round {r + 1} {name}: {rates[name][-1]:.2f} tok/s "
                          f"({time.perf_counter() - start:.1f}s)", file=sys.stderr)
            results[kind] = rates
            del configs
    print("| weights | configuration | decode tok/s (median) | runs |\n|---|---|---|---|")
    for kind, rates in results.items():
        for name, values in rates.items():
            print(f"| {kind} | {name} | {statistics.median(values):.2f} | "
                  f"{', '.join(f'{v:.2f}' for v in values)} |")
    if args.out is not None:
        args.out.write_text(json.dumps({"tokens": args.tokens, "rounds": args.rounds,
                                        "results": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
