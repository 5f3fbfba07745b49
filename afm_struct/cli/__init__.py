"""The ``afm-struct`` command line: one module per subcommand, each with ``register(subparsers)``."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from .. import __version__
from ..errors import AfmError

# Each module defines register(subparsers) and sets a ``func(args) -> int`` default.
_COMMANDS = ("serve", "cluster", "generate", "compile", "bench", "run_batch")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The full argument parser (subcommands registered from their modules).  ``command``: the
    subcommand about to run, when known; the benchmark harness's modules (~1 s of imports) are
    then imported only for ``bench``, and ``bench`` is listed without its kinds otherwise."""
    parser = argparse.ArgumentParser(prog="afm-struct", description=__doc__)
    parser.add_argument("--version", action="version", version=f"afm-struct {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMANDS:
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:  # a subcommand whose module is not built yet
            if exc.name != f"{__name__}.{name}":
                raise
            continue
        if name == "bench":
            module.register(sub, kinds=command in (None, "bench"))
        else:
            module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point: re-exec with an optimized BLAS if needed, then dispatch the subcommand."""
    args_list = sys.argv[1:] if argv is None else argv
    # transformers prints an advisory about PyTorch on import; afm-struct never needs torch.
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    if args_list and args_list[0] not in ("--version", "-h", "--help", "compile"):
        from ..models.blas import reexec_with_optimized_blas

        if argv is None:
            reexec_with_optimized_blas()
    parser = build_parser(args_list[0] if args_list and args_list[0] in _COMMANDS else None)
    args = parser.parse_args(args_list)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    logging.basicConfig(level=getattr(args, "log_level", "info").upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except AfmError as exc:
        print(f"afm-struct: error: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
