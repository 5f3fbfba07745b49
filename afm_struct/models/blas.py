"""Give MLX's CPU backend an optimized BLAS.

The Linux ``mlx[cpu]`` wheel bundles the reference BLAS (~2 GFLOP/s fp32 GEMM on the reference
machine).  Preloading OpenBLAS or MKL interposes ``cblas_sgemm`` and friends (~139 GFLOP/s).
``LD_PRELOAD`` only takes effect at process start, so the CLI re-executes itself once with it
set.  ``python -m afm_struct.models.blas`` prints the library to preload (for the Makefile).
"""

from __future__ import annotations

import glob
import logging
import os
import sys
from pathlib import Path

log = logging.getLogger("afm_struct")

_MARKER = "AFM_STRUCT_BLAS_REEXEC"
_CANDIDATES = (
    "/usr/lib/*-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/*-linux-gnu/libopenblas.so.0",
    "/usr/lib/*-linux-gnu/openblas-openmp/libopenblas.so.0",
    "/usr/lib64/libopenblas*.so.0",
    "/usr/local/lib/libopenblas.so.0",
)
FIX_HINT = ("apt-get install libopenblas0-pthread  (or: pip install mkl), then restart; "
            "or set AFM_STRUCT_BLAS=/path/to/libopenblas.so")


def find_optimized_blas() -> Path | None:
    """An optimized CBLAS shared library on this machine, if any (OpenBLAS, then MKL)."""
    override = os.environ.get("AFM_STRUCT_BLAS")
    if override:
        return Path(override) if override != "none" and Path(override).is_file() else None
    for pattern in _CANDIDATES:
        for hit in sorted(glob.glob(pattern)):
            return Path(hit)
    for root in {sys.prefix, sys.base_prefix}:
        for hit in sorted(glob.glob(os.path.join(root, "lib", "libmkl_rt.so*"))):
            return Path(hit)
    return None


def blas_in_use() -> str:
    """Which BLAS the current process has mapped: 'openblas', 'mkl', 'reference' or 'system'."""
    if sys.platform == "darwin":
        return "accelerate"
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return "unknown"
    if "libopenblas" in maps:
        return "openblas"
    if "libmkl" in maps:
        return "mkl"
    if "mlx_cpu.libs/libblas" in maps:
        return "reference"
    return "system"


def needs_preload() -> bool:
    """True on Linux when the process runs without an optimized BLAS preloaded."""
    if not sys.platform.startswith("linux") or os.environ.get(_MARKER):
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
    """Log one warning with the fix when MLX runs on the reference BLAS."""
    if blas_in_use() == "reference":
        log.warning("MLX is using the reference BLAS (CPU matmuls ~50x slower); fix: %s", FIX_HINT)


if __name__ == "__main__":
    found = find_optimized_blas()
    print(found or "")
