"""The JSON Schema dev set for randomized tests: tests/grammar/data, plus the shared
JSONSchemaBench dev subset (shared/jsonschemabench/data) when a parent directory holds it."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

LOCAL = Path(__file__).parent / "grammar" / "data"


@lru_cache(maxsize=1)
def dev_files() -> tuple[Path, ...]:
    """Every dev-set file (the shared subset is found above this checkout, worktrees included)."""
    files = sorted(LOCAL.glob("*.json"))
    for parent in Path(__file__).resolve().parents:
        shared = parent / "shared" / "jsonschemabench" / "data"
        if shared.is_dir():
            return tuple(files + sorted(shared.glob("*.json")))
    return tuple(files)


def dev_doc(index: int) -> dict[str, Any]:
    """File ``index`` (modulo the set's size): ``{"schema": ..., "tests": [...]}``."""
    files = dev_files()
    return json.loads(files[index % len(files)].read_text())
