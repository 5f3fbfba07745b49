"""Compile memory (grammar/compile_memory.py): estimated, admitted against a total, weighed in
the cache; and the parser's item limit stops the ambiguous grammar of issue 46 early."""

from __future__ import annotations

from typing import Any

import pytest

from afm_struct.errors import OverloadedError
from afm_struct.grammar.cache import LRUCache
from afm_struct.grammar.compile_memory import CompileMemory, estimate_compile_mb
from afm_struct.grammar.compiler import ConstraintCompiler
from afm_struct.grammar.engines.llguidance_engine import LLGuidanceEngine
from afm_struct.grammar.engines.protocol import allocate_bitmask
from afm_struct.grammar.spec import CompileOptions, JsonSchemaRequest, Rung


def test_the_estimate_follows_the_measured_rate() -> None:
    # Measured: 330 KB of wide schema, +72 MB; the estimate rounds that rate up.
    assert 72 < estimate_compile_mb(330 * 1024) < 100
    assert estimate_compile_mb(0) == pytest.approx(1.0)


def test_compiles_hold_their_estimate_and_one_that_does_not_fit_is_refused() -> None:
    memory = CompileMemory(10)
    with memory.admit(6):
        with memory.admit(4):
            assert memory.used_mb == 10
            with pytest.raises(OverloadedError) as info:
                with memory.admit(1):
                    pass
        assert info.value.status == 503 and info.value.code == "compile_memory_busy"
        assert info.value.retry_after >= 1
    assert memory.used_mb == 0 and memory.refused == 1
    with memory.admit(50):  # a lone compile is admitted whatever its size (bounded apart)
        assert memory.used_mb == 50
    assert memory.used_mb == 0


def test_the_cache_evicts_by_weight_too() -> None:
    cache: LRUCache[str] = LRUCache(10, max_weight=100)
    cache.put("a", "A", 60)
    cache.put("b", "B", 30)
    cache.put("c", "C", 30)  # 120 > 100: "a", the least recently used, goes
    assert cache.get("a") is None and cache.get("b") == "B" and cache.weight == 60
    cache.put("huge", "H", 101)  # heavier than the whole bound: not kept
    assert cache.get("huge") is None and len(cache) == 2
    cache.put("b", "B2", 10)  # a refresh re-weighs
    assert cache.weight == 40
    cache.clear()
    assert cache.weight == 0 and len(cache) == 0


def _wide(n: int) -> dict[str, Any]:
    return {"type": "object", "properties": {f"k{i}": {"type": "string"} for i in range(n)}}


def test_the_compiler_keeps_at_most_its_cache_memory(tokenizer: Any) -> None:
    compiler = ConstraintCompiler(tokenizer, CompileOptions(cache_memory_mb=5))
    for i in range(3):  # ~3.3 MB each: only the latest fits
        compiler.compile(JsonSchemaRequest({**_wide(300), "title": f"t{i}"}))
    assert len(compiler.cache) == 1 and compiler.cache.weight <= 5
    assert compiler.memory.used_mb == 0


def test_over_the_per_compile_bound_a_schema_is_served_generic_json_without_compiling(tokenizer: Any,
                                                                                     monkeypatch) -> None:
    compiler = ConstraintCompiler(tokenizer, CompileOptions(max_compile_mb=2))
    monkeypatch.setattr(compiler.engine, "exact", lambda *a, **k: pytest.fail("compiled exact"))
    monkeypatch.setattr(compiler.engine, "start_exact", lambda *a, **k: pytest.fail("compiled exact"))
    result = compiler.compile(JsonSchemaRequest(_wide(300)))
    assert (result.rung, result.reason) == (Rung.GENERIC_JSON, "compile_memory")


AMBIGUOUS = "start: e\ne: e e e | e e | /[a-z0-9 ]/"


def test_the_item_limit_stops_the_ambiguous_grammar_within_its_first_tokens(tokenizer: Any) -> None:
    """Under llguidance's default item limit (50,000) it went on past 59 tokens, each step
    dearer (up to a second); under DEFAULT_LIMITS it stops, as a budget hit, by token 20."""
    matcher = LLGuidanceEngine(tokenizer).compile_lark(AMBIGUOUS).new_matcher()
    row = allocate_bitmask(1, tokenizer.vocab_size)[0]
    steps = 0
    for token in tokenizer.encode("a b c d e f g h i j " * 10):
        matcher.fill_mask(row)
        if matcher.error() is not None or not matcher.advance(token):
            break
        steps += 1
    assert matcher.over_limits(), matcher.error()
    assert steps <= 20
