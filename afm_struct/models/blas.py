"""Give MLX's CPU backend an optimized BLAS.

The Linux ``mlx[cpu]`` wheel bundles the reference BLAS (~2 GFLOP/s fp32 GEMM on the reference
machine); OpenBLAS or MKL interposing ``cblas_sgemm`` and friends gives ~139 GFLOP/s.
``import afm_struct`` loads one ahead of MLX (:mod:`.blas_select`); the CLI re-executes itself
with ``LD_PRELOAD`` only when that could not be done.  ``python -m afm_struct.models.blas``
prints the library to preload (for the Makefile).
"""

from __future__ import annotations

import logging
import os
import sys

from . import blas_select
from .blas_select import FIX_HINT, find_optimized_blas, select_optimized_blas

__all__ = ["FIX_HINT", "blas_in_use", "find_optimized_blas", "needs_preload",
           "reexec_with_optimized_blas", "select_optimized_blas", "warn_if_reference_blas"]

log = logging.getLogger("afm_struct")

_MARKER = "AFM_STRUCT_BLAS_REEXEC"


def blas_in_use() -> str:
    """Which BLAS the current process has mapped: 'openblas', 'mkl', 'reference' or 'system'."""
    if sys.platform == "darwin":
        return "accelerate"
    maps = blas_select.process_maps()
    if not maps:
        return "unknown"
    if "libopenblas" in maps:
        return "openblas"
    if "libmkl" in maps:
        return "mkl"
    if "mlx_cpu.libs/libblas" in maps:
        return "reference"
    return "system"


def needs_preload() -> bool:
    """True on Linux when the process runs without an optimized BLAS preloaded or selected."""
    if not sys.platform.startswith("linux") or os.environ.get(_MARKER) or blas_select.selected:
        return False
    preload = os.environ.get("LD_PRELOAD", "")
    return "openblas" not in preload and "mkl" not in preload


def reexec_with_optimized_blas() -> None:
    """Re-execute this process with an optimized BLAS preloaded, when one is available.

    Returns without doing anything when already preloaded, on macOS, or when no library is
    found (then :func:`warn_if_reference_blas` tells the user the fix).
    """
    if not needs_preload():
        return
    lib = find_optimized_blas()
    env = dict(os.environ, **{_MARKER: "1"})
    if lib is None:
        os.environ[_MARKER] = "1"
        return
    env["LD_PRELOAD"] = f"{lib}:{env['LD_PRELOAD']}" if env.get("LD_PRELOAD") else str(lib)
    argv = list(getattr(sys, "orig_argv", [sys.executable, *sys.argv]))
    try:
        os.execve(sys.executable, [sys.executable, *argv[1:]], env)
    except OSError as exc:  # keep running on the reference BLAS rather than failing
        log.warning("could not re-execute with %s preloaded: %s", lib, exc)


def warn_if_reference_blas() -> None:
    """Log one warning (once per process) with the fix when MLX runs on the reference BLAS."""
    if not blas_select.warned and blas_in_use() == "reference":
        blas_select.warned = True
        log.warning("MLX is using the reference BLAS (CPU matmuls ~50x slower); fix: %s", FIX_HINT)


if __name__ == "__main__":
    found = find_optimized_blas()
    print(found or "")
