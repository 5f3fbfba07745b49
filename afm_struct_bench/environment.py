"""The environment a benchmark ran in, recorded with every result file."""

from __future__ import annotations

import os
import platform
import sys
import time
from importlib import metadata
from typing import Any

_PACKAGES = ("afm-struct", "mlx", "mlx-lm", "llguidance", "outlines-core", "transformers", "tokenizers",
             "fastapi", "uvicorn")


def cpu_name() -> str:
    """The CPU model name (Linux /proc/cpuinfo, else platform)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment() -> dict[str, Any]:
    """Versions, CPU/chip, cores, MLX device and BLAS, and the time."""
    from afm_struct.models.blas import blas_in_use
    from afm_struct.models.loader import device_name

    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "mlx_device": device_name(),
        "blas": blas_in_use(),
        "versions": versions,
        "command": " ".join(sys.argv),
    }
