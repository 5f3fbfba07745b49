"""Compile limits: time and memory bounds end in a downgrade (never a hang or a dead server)."""

from __future__ import annotations

import time

import pytest

from afm_struct.grammar.compiler import ConstraintCompiler
from afm_struct.grammar.spec import CompileOptions, JsonSchemaRequest, Mode, Rung
from afm_struct.grammar.worker import ProcessWorker, WorkerLimitError

BIG = {"type": "object", "properties": {f"field_{i}": {"type": "string", "pattern": "^[a-z]{2,40}$"}
                                        for i in range(40)}, "additionalProperties": False,
       "required": [f"field_{i}" for i in range(40)]}


def test_outlines_compile_over_time_limit_is_a_downgrade(tokenizer) -> None:  # type: ignore[no-untyped-def]
    compiler = ConstraintCompiler(tokenizer, CompileOptions(backend="outlines", timeout_s=0.5))
    try:
        start = time.perf_counter()
        c = compiler.compile(JsonSchemaRequest(BIG))
        elapsed = time.perf_counter() - start
        assert c.mode is Mode.DOWNGRADED
        assert c.reason == "compile_timeout"
        assert elapsed < 5  # bounded: the child was killed, nothing waited for it
        # The worker recovers: a small schema compiles afterwards in a fresh child.
        compiler.options = CompileOptions(backend="outlines", timeout_s=20)
        small = compiler.compile(JsonSchemaRequest({"type": "boolean"}))
        assert small.rung is Rung.EXACT
    finally:
        compiler.close()


def test_worker_memory_limit_kills_only_the_child() -> None:
    worker = ProcessWorker(("tests.grammar.test_limits", "child_state", ()), max_memory_mb=300)
    try:
        with pytest.raises(WorkerLimitError) as info:
            worker.call("tests.grammar.test_limits", "child_allocate", (2000,), timeout_s=30)
        assert info.value.reason == "compile_memory"
        assert worker.call("tests.grammar.test_limits", "child_allocate", (1,), timeout_s=30) == 1
    finally:
        worker.close()


def child_state() -> None:
    return None


def child_allocate(state: None, megabytes: int) -> int:
    """Runs in the worker child: allocate ``megabytes`` MB (beyond RLIMIT_AS → MemoryError)."""
    block = bytearray(megabytes * 1024 * 1024)
    return len(block) // (1024 * 1024)


def test_unexpected_failure_is_served_not_raised(tokenizer, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from afm_struct.grammar import compiler as compiler_module

    def boom(*_args):  # type: ignore[no-untyped-def]
        raise RuntimeError("library quirk")

    monkeypatch.setattr(compiler_module, "rewrite_schema", boom)
    c = ConstraintCompiler(tokenizer).compile(JsonSchemaRequest({"type": "string"}))
    assert (c.rung, c.reason) == (Rung.UNCONSTRAINED, "internal_error:RuntimeError")
    assert c.validate('"x"').ok and not c.validate("3").ok
