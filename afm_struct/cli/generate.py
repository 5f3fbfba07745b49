"""``afm-struct generate``: stream a completion for a prompt or a messages file to stdout."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..errors import InvalidRequestError


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``generate`` subcommand."""
    p = sub.add_parser("generate", help="generate a completion and stream it to stdout")
    p.add_argument("prompt", nargs="?", help="the user message (or use --messages)")
    p.add_argument("--messages", type=Path, help="a JSON file with an OpenAI-style messages list")
    p.add_argument("--model", default=None, help="GGUF file, mlx-lm directory or hub id (default: embedded)")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--stop", action="append", default=[], help="stop sequence (repeatable)")
    p.add_argument("--schema", type=Path, default=None, help="constrain the output to this JSON Schema")
    p.add_argument("--json-object", action="store_true", help="constrain the output to a JSON object")
    p.add_argument("--no-fast-forward", action="store_true", help="disable grammar fast-forward")
    p.add_argument("--weights", default="auto", help="auto, float32, float16, bfloat16 or quantized")
    p.add_argument("--log-level", default="warning")
    p.add_argument("--verbose", action="store_true", help="print model, device and speed to stderr")
    p.set_defaults(func=run)


def read_messages(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The chat from ``--messages`` or the positional prompt."""
    if args.messages is not None:
        try:
            messages = json.loads(args.messages.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise InvalidRequestError(f"cannot read messages from {args.messages}: {exc}") from exc
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise InvalidRequestError(f"{args.messages} must hold a JSON list of message objects")
        return messages
    if not args.prompt:
        raise InvalidRequestError("give a prompt or --messages FILE")
    return [{"role": "user", "content": args.prompt}]


def run(args: argparse.Namespace) -> int:
    """Load the model, generate, stream text; exit 1 on a generation error."""
    from ..decoding.generator import Finished, FinishReason, GenerationRequest, Generator
    from ..decoding.sampling import SamplingParams
    from ..grammar.spec import Mode
    from ..models import load_model
    from ..models.blas import blas_in_use, warn_if_reference_blas

    messages = read_messages(args)
    warn_if_reference_blas()
    loaded = load_model(args.model, weights=args.weights,
                        progress=(lambda m: print(f"[afm-struct] {m}", file=sys.stderr))
                        if args.verbose else None)
    if args.verbose:
        print(f"[afm-struct] model {loaded.info.id} ({loaded.info.weights}) on {loaded.info.device}, "
              f"BLAS {blas_in_use()}", file=sys.stderr)
    constraint = None
    if args.schema is not None or args.json_object:
        from .structured import compile_for_cli

        constraint = compile_for_cli(loaded.tokenizer, args.schema, json_object=args.json_object)
    params = SamplingParams(temperature=args.temperature, top_p=args.top_p, seed=args.seed,
                            max_tokens=args.max_tokens, stop=tuple(args.stop))
    request = GenerationRequest(loaded.tokenizer.encode_chat(messages), params, constraint=constraint,
                                fast_forward=not args.no_fast_forward)
    generator = Generator.from_loaded(loaded)
    for event in generator.generate(request):
        if isinstance(event, Finished):
            if event.error is not None:
                print(f"\nafm-struct: error: {event.error.message}", file=sys.stderr)
                return 1
            sys.stdout.write("\n")
            if args.verbose:
                pre, dec = event.timings.rates(event.usage)
                print(f"[afm-struct] finish={event.reason} prompt={event.usage.prompt_tokens} "
                      f"completion={event.usage.completion_tokens} prefill={pre or 0:.1f} tok/s "
                      f"decode={dec or 0:.1f} tok/s", file=sys.stderr)
            if constraint is not None and constraint.mode is not Mode.ENFORCED:
                outcome = constraint.validate(event.text)
                print(f"[afm-struct] best-effort output valid: {outcome.ok} "
                      f"{'; '.join(outcome.errors)}", file=sys.stderr)
                return 0 if outcome.ok else 3
            if event.reason is FinishReason.LENGTH and constraint is not None:
                print("[afm-struct] max tokens reached: the output is incomplete", file=sys.stderr)
                return 3
        else:
            sys.stdout.write(event.text)
            sys.stdout.flush()
    return 0
