"""Model loading: mlx-lm directories and hub ids, GGUF files, the embedded default.

Names load lazily: ``afm_struct.models.blas`` must run before MLX is imported (see there), and
importing it imports this package first.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["LoadedModel", "ModelInfo", "load_model", "load_tokenizer"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'afm_struct.models' has no attribute {name!r}")
    return getattr(importlib.import_module("afm_struct.models.loader"), name)
