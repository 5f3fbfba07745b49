"""MaskBench on a CI-sized sample, through the whole compiler, for each engine.

The committed sample (tests/grammar/data) always runs; a spread of the shared dev set runs too
when /work/shared/jsonschemabench/data is present.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from afm_struct.grammar.compiler import ConstraintCompiler
from afm_struct.grammar.engines.protocol import allocate_bitmask
from afm_struct.grammar.spec import CompileOptions
from afm_struct_bench.masks import run_file, summarize

from .conftest import DATA, SHARED

SAMPLE = sorted(DATA.glob("*.json"))


def _run(compiler, tokenizer, files: list[Path]) -> dict:  # type: ignore[no-untyped-def]
    bitmask = allocate_bitmask(1, tokenizer.vocab_size)
    rows = [run_file(compiler, tokenizer, f, bitmask) for f in files]
    return summarize(rows, compiler.options.backend, [])


# Valid instances that list keys in another order than the schema (llguidance's JSON grammar
# fixes the order): rejected under property_order="schema", accepted under "any".
PROPERTY_ORDER = {"Glaiveai2K---calculate_area_38196395.json", "Github_hard---o83846.json",
                  "Github_easy---o87817.json", "Github_medium---o27148.json"}


def test_committed_sample_llguidance(compiler, tokenizer) -> None:  # type: ignore[no-untyped-def]
    assert len(SAMPLE) >= 10
    report = _run(compiler, tokenizer, SAMPLE)
    assert report["served"] == report["schemas"]
    assert report["invalidation_error"] == 0, report["failures"]
    assert {f["file"] for f in report["failures"]} == PROPERTY_ORDER
    # The sample holds schemas that need rewrites to be exact; the `not` one (Synthesized
    # ..._not_2) was downgraded until `not` got its positive form.
    assert report["enforced"] == len(SAMPLE)
    assert report["rewrites"].get("oneof_disjoint", 0) >= 2
    assert report["rewrites"].get("not_positive", 0) >= 1


def test_committed_sample_llguidance_any_order(tokenizer) -> None:  # type: ignore[no-untyped-def]
    compiler = ConstraintCompiler(tokenizer, CompileOptions(property_order="any"))
    report = _run(compiler, tokenizer, SAMPLE)
    assert report["served"] == report["schemas"]
    assert report["invalidation_error"] == 0, report["failures"]
    assert report["validation_error"] == 0, report["failures"]
    assert report["enforced"] >= len(SAMPLE) - 2


def test_committed_sample_outlines(outlines_compiler, tokenizer) -> None:  # type: ignore[no-untyped-def]
    # outlines-core index builds take seconds to minutes: the files it builds in under ~1 s.
    quick = [DATA / f"{n}.json" for n in ("Github_trivial---o10076", "JsonSchemaStore---first-timers",
                                          "Kubernetes---kb_753_Normalized", "Snowplow---sp_84_Normalized",
                                          "Github_medium---o8453")]
    report = _run(outlines_compiler, tokenizer, quick)
    assert report["served"] == report["schemas"]
    assert report["invalidation_error"] == 0, report["failures"]
    assert report["validation_error"] == 0, report["failures"]
    assert report["enforced"] >= 2
    # Open objects are not exact on outlines-core (it closes them): downgraded with that reason.
    assert report["reasons"].get("unsupported_keyword:additionalProperties", 0) >= 1


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"JSONSchemaBench dev set not present at {SHARED}")
def test_shared_dev_sample_llguidance(compiler, tokenizer) -> None:  # type: ignore[no-untyped-def]
    files = sorted(SHARED.glob("*.json"))[::110][:30]
    report = _run(compiler, tokenizer, files)
    assert report["served"] == report["schemas"] - report["compile_error"]
    assert report["invalidation_error"] == 0, report["failures"]
    assert report["enforced"] >= 0.8 * len(files)
