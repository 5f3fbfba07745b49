"""``afm-struct bench KIND``: each benchmark lives in ``afm_struct_bench/<kind>.py``."""

from __future__ import annotations

import argparse
import importlib

# Each module defines register(subparsers) for its own ``bench <kind>`` subcommand.
BENCHMARKS = ("masks", "step", "decode", "extract", "serve", "soak", "report", "completions")


def register(sub: argparse._SubParsersAction, *, kinds: bool = True) -> None:
    """Add ``bench`` and, with ``kinds``, its benchmarks (importing the harness: ~1 s, which
    another subcommand's start need not pay)."""
    parser = sub.add_parser("bench", help="benchmarks (masks, decode, ...)")
    if not kinds:
        return
    kinds_sub = parser.add_subparsers(dest="bench", metavar="KIND")
    for name in BENCHMARKS:
        try:
            module = importlib.import_module(f"afm_struct_bench.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"afm_struct_bench.{name}":
                raise
            continue
        module.register(kinds_sub)
