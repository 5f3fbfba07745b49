#!/usr/bin/env bash
# Give MLX's CPU backend an optimized BLAS (see afm_struct/models/blas.py).  Debian's OpenBLAS
# first; PyPI's MKL when apt is not available to us.  Never fails the set-up: without either,
# afm-struct runs on the reference BLAS and says so with the fix.
set -u
py="$1"
[ "$(uname -s)" = Linux ] || exit 0
found=$("$py" -m afm_struct.models.blas 2>/dev/null)
[ -n "$found" ] && exit 0
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "installing OpenBLAS (libopenblas0-pthread) for MLX's CPU backend"
  (apt-get install -y -qq libopenblas0-pthread >/dev/null 2>&1 ||
   (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq libopenblas0-pthread >/dev/null 2>&1))
fi
found=$("$py" -m afm_struct.models.blas 2>/dev/null)
[ -n "$found" ] && exit 0
echo "installing MKL from PyPI for MLX's CPU backend"
"$py" -m pip install --quiet mkl || echo "warning: no optimized BLAS installed; MLX will be slow on CPU"
exit 0
