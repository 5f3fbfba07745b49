"""Lazy package exports: a package's ``__init__`` names what it exports and the module each
name lives in, and a name's module is imported on its first use.

Importing one module of a package (as most code does) then loads only that module, not the
package's every export: ``afm_struct`` must load an optimized BLAS before MLX, and the grammar
rooms would otherwise pull in each other's engines at start-up.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``exports`` maps each exported name to its
    module (absolute, or relative to ``package`` when it starts with a dot)."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module, package), name)

    return __getattr__
