"""``afm-struct run-batch``: answer a JSONL batch file without a server (vLLM's format).

Each input line is ``{"custom_id", "method": "POST", "url", "body"}`` for
``/v1/chat/completions``, ``/v1/responses`` or ``/v1/completions``; each output line is
OpenAI's batch output line.  A progress line (lines done, tok/s, ETA) goes to stderr, and a
summary at the end (valid, downgraded, failed, tokens, time).  ``--resume`` skips the lines
whose ``custom_id`` the output (or ``--errors``) file already answers, so a run killed half
way is finished by running the same command again with it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from ..errors import AfmError

# Seconds between progress lines when stderr is not a terminal (a log).
LOG_EVERY_S = 10.0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``run-batch`` subcommand."""
    p = sub.add_parser("run-batch", help="answer a JSONL batch file without a server",
                       description=__doc__.split("\n\n")[1] if __doc__ else None)
    p.add_argument("-i", "--input", type=Path, required=True, help="the batch input (JSONL)")
    p.add_argument("-o", "--output", type=Path, required=True, help="where the answers go (JSONL)")
    p.add_argument("--errors", type=Path, default=None,
                   help="where failed lines go (default: the output file, as vLLM)")
    p.add_argument("--concurrency", type=int, default=8, metavar="N",
                   help="lines generated at once (rows of one batch; default 8)")
    p.add_argument("--resume", action="store_true",
                   help="skip lines already answered in the output/errors files and append")
    p.add_argument("--model", default=None,
                   help="GGUF file, mlx-lm directory or hub id (default: embedded); scripted[:TOKENS_PER_S] "
                        "for the scripted test model")
    p.add_argument("--weights", default="auto", help="auto, float32, float16, bfloat16 or quantized")
    p.add_argument("--log-level", default="warning")
    p.set_defaults(func=run)


class Progress:
    """Writes the progress line: rewritten in place on a terminal, every
    :data:`LOG_EVERY_S` seconds otherwise."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.last = 0.0

    def __call__(self, summary: Any) -> None:
        now = time.monotonic()
        final = summary.done == summary.lines
        if self.tty:
            if final or now - self.last >= 0.2:
                print(f"\r{summary.progress()}\033[K", end="\n" if final else "", file=sys.stderr, flush=True)
                self.last = now
        elif final or now - self.last >= LOG_EVERY_S:
            print(summary.progress(), file=sys.stderr, flush=True)
            self.last = now


def run(args: argparse.Namespace) -> int:
    """Load the model, answer the file, print the summary (failed lines are answers too: exit 0)."""
    from ..models.blas import warn_if_reference_blas
    from ..resources import server_module
    from .serve import parse_scripted_spec

    if args.concurrency < 1:
        raise AfmError(f"--concurrency must be >= 1, not {args.concurrency}")
    if not args.input.is_file():
        raise AfmError(f"--input {args.input}: no such file")
    tokens_per_s = parse_scripted_spec(args.model)
    if tokens_per_s is not None:
        from ..testing import served_scripted_model

        loaded = served_scripted_model(tokens_per_s)
    else:
        from ..models import load_model

        warn_if_reference_blas()
        loaded = load_model(args.model, weights=args.weights,
                            progress=lambda m: print(f"[afm-struct] {m}", file=sys.stderr))
    offline = server_module("batches.offline")
    summary = offline.run_batch(loaded, args.input, args.output, errors_path=args.errors,
                                concurrency=args.concurrency, resume=args.resume, progress=Progress())
    print(f"afm-struct run-batch: {summary.text()}", file=sys.stderr)
    return 0
