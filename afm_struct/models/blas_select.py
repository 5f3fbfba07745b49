"""Finding an optimized BLAS and loading it ahead of MLX, in this process.

The Linux ``mlx[cpu]`` wheel bundles the reference BLAS.  OpenBLAS or MKL loaded into the
process's global symbol scope *before* MLX is loaded interposes ``cblas_sgemm`` and friends:
libmlx's references bind to the first definition in the global scope, ahead of the library
it bundles.  ``import afm_struct`` calls :func:`select_optimized_blas` (``dlopen`` with
``RTLD_GLOBAL``), so library use gets the fast BLAS as the CLI does; once MLX is loaded it is
too late, and one warning gives the fix.  (This module is apart from :mod:`.blas`, which
``python -m`` runs: a module imported by ``import afm_struct`` cannot be run that way cleanly.)
"""

from __future__ import annotations

import glob
import os
import sys
import warnings
from pathlib import Path

_CANDIDATES = (
    "/usr/lib/*-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/*-linux-gnu/libopenblas.so.0",
    "/usr/lib/*-linux-gnu/openblas-openmp/libopenblas.so.0",
    "/usr/lib64/libopenblas*.so.0",
    "/usr/local/lib/libopenblas.so.0",
)
FIX_HINT = ("apt-get install libopenblas0-pthread  (or: pip install mkl), then restart; "
            "or set AFM_STRUCT_BLAS=/path/to/libopenblas.so")

# The library select_optimized_blas() loaded ahead of MLX in this process, if any.
selected: Path | None = None
# One warning about the BLAS per process, whichever path gives it.
warned = False


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


def process_maps() -> str:
    """This process's memory map (Linux ``/proc/self/maps``); empty where there is none."""
    try:
        return Path("/proc/self/maps").read_text()
    except OSError:
        return ""


def select_optimized_blas() -> Path | None:
    """Load an optimized BLAS ahead of MLX so MLX's CPU matmuls use it (Linux; idempotent).

    Returns the library it loaded, or None: not Linux, one already mapped (``LD_PRELOAD``),
    none found (``AFM_STRUCT_BLAS=none`` says none), or MLX already loaded with the reference
    BLAS (then a warning says how to fix it: import afm_struct before mlx, or preload it).
    """
    global selected
    if selected is not None or not sys.platform.startswith("linux"):
        return selected
    maps = process_maps()
    if "libopenblas" in maps or "libmkl" in maps:
        return None
    lib = find_optimized_blas()
    if lib is None:
        return None
    if "libmlx" in maps:  # its cblas references are bound already
        warn_once(f"mlx was imported before afm_struct, so MLX runs on the reference BLAS (CPU "
                  f"matmuls ~50x slower); import afm_struct first, or start Python with "
                  f"LD_PRELOAD={lib}")
        return None
    import ctypes

    try:
        ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        warn_once(f"could not load {lib} ({exc}): MLX runs on the reference BLAS; fix: {FIX_HINT}")
        return None
    selected = lib
    return lib


def warn_once(message: str) -> None:
    """A RuntimeWarning, the first time only (per process)."""
    global warned
    if not warned:
        warned = True
        warnings.warn(message, RuntimeWarning, stacklevel=3)
