"""Library use gets the optimized BLAS without LD_PRELOAD: ``import afm_struct`` loads it ahead
of MLX, and libmlx's ``cblas_sgemm`` binds to it (checked with the dynamic linker's own record,
``LD_DEBUG=bindings``, in fresh processes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from afm_struct.models.blas_select import find_optimized_blas

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or find_optimized_blas() is None,
                                reason="Linux with OpenBLAS or MKL installed (make setup installs one)")

GEMM = "import mlx.core as mx; a = mx.ones((64, 64)); mx.eval(a @ a)"
ROOT = Path(__file__).resolve().parents[2]


def _fresh(code: str, tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], str]:
    """Run ``code`` in a new interpreter without LD_PRELOAD; (result, where libmlx's
    cblas_sgemm was bound, from the dynamic linker's debug output)."""
    clean = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "AFM_STRUCT_BLAS")}
    clean.update(PYTHONPATH=str(ROOT), LD_DEBUG="bindings", LD_DEBUG_OUTPUT=str(tmp_path / "ld"), **env)
    done = subprocess.run([sys.executable, "-c", code], env=clean, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    bound = [line for f in tmp_path.glob("ld.*") for line in f.read_text(errors="replace").splitlines()
             if "libmlx" in line and "`cblas_sgemm'" in line]
    assert bound, "the dynamic linker recorded no binding of libmlx's cblas_sgemm"
    return done, bound[-1].split(" to ", 1)[1]


def test_import_afm_struct_selects_the_optimized_blas_for_mlx(tmp_path: Path) -> None:
    done, target = _fresh("import afm_struct\n" + GEMM + "\nfrom afm_struct.models.blas import blas_in_use\n"
                          "print(blas_in_use())", tmp_path)
    lib = find_optimized_blas()
    assert lib is not None
    assert target.startswith(str(lib)), target
    assert done.stdout.strip() in ("openblas", "mkl")
    assert "RuntimeWarning" not in done.stderr


def test_mlx_imported_first_stays_on_the_reference_blas_with_one_warning(tmp_path: Path) -> None:
    done, target = _fresh(GEMM + "\nimport afm_struct\nimport afm_struct.models.blas as b\n"
                          "b.select_optimized_blas()\nprint(b.blas_in_use())", tmp_path)
    assert "mlx_cpu.libs/libblas" in target
    assert done.stdout.strip() == "reference"
    assert done.stderr.count("RuntimeWarning") == 1
    assert "import afm_struct first" in done.stderr and "LD_PRELOAD=" in done.stderr


def test_afm_struct_blas_none_keeps_the_reference_blas(tmp_path: Path) -> None:
    _, target = _fresh("import afm_struct\n" + GEMM, tmp_path, AFM_STRUCT_BLAS="none")
    assert "mlx_cpu.libs/libblas" in target
