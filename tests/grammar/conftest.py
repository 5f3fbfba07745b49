"""Shared fixtures: the embedded tokenizer and compilers for both engines (built once)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from afm_struct.grammar.compiler import ConstraintCompiler
from afm_struct.grammar.spec import CompileOptions

DATA = Path(__file__).parent / "data"
# The shared dev set sits beside the checkout (/work/shared next to /work/main) or, for a
# worktree, beside one of its parents.
SHARED = next((p / "shared" / "jsonschemabench" / "data" for p in Path(__file__).resolve().parents
               if (p / "shared" / "jsonschemabench" / "data").is_dir()),
              Path(__file__).resolve().parents[2].parent / "shared" / "jsonschemabench" / "data")


@pytest.fixture(scope="session")
def compiler(tokenizer) -> ConstraintCompiler:  # type: ignore[no-untyped-def]
    return ConstraintCompiler(tokenizer, CompileOptions())


@pytest.fixture(scope="session")
def outlines_compiler(tokenizer) -> Iterator[ConstraintCompiler]:  # type: ignore[no-untyped-def]
    c = ConstraintCompiler(tokenizer, CompileOptions(backend="outlines", timeout_s=20.0, max_memory_mb=3072))
    yield c
    c.close()
