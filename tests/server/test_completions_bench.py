"""``bench completions``: constrained vs free on the same raw prompts through /v1/completions
(scripted model over real HTTP: prose free, schema-valid constrained)."""

from __future__ import annotations

import json
from pathlib import Path

from afm_struct_bench.completions import run_bench, summarize, verdict, write_report


def test_free_prose_is_invalid_and_constrained_is_valid(serve, tmp_path: Path) -> None:
    live = serve("Sure, here it is: the answer")
    result = run_bench(live.url, max_tokens=48)
    summary = result["summary"]
    assert summary["free"]["valid"] == 0 and summary["free"]["parses"] == 0
    assert summary["constrained"]["valid"] == 1
    rows = result["rows"]
    assert {r["constraint_mode"] for r in rows if r["mode"] == "constrained"} == {"exact"}
    assert all(r["constraint_mode"] is None for r in rows if r["mode"] == "free")
    write_report(result, tmp_path)
    assert json.loads((tmp_path / "completions.json").read_text())["summary"] == summary
    report = (tmp_path / "report.md").read_text()
    assert "| constrained | 3 | 100% | 100% |" in report and "| free | 3 | 0% | 0% |" in report
    assert (tmp_path / "validity.png").stat().st_size > 0 and (tmp_path / "speed.png").stat().st_size > 0


def test_verdict_and_summary() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    assert verdict('{"a": 1}', schema) == {"parses": True, "valid": True}
    assert verdict('{"a": "x"}', schema) == {"parses": True, "valid": False}
    assert verdict("nope", schema) == {"parses": False, "valid": False}
    rows = [{"mode": "free", "parses": True, "valid": False, "finish_reason": "stop", "latency_s": 1.0,
             "tok_s": 10.0, "completion_tokens": 10},
            {"mode": "free", "parses": False, "valid": False, "finish_reason": "length", "latency_s": 3.0,
             "tok_s": None, "completion_tokens": 0}]
    s = summarize(rows)["free"]
    assert s["parses"] == 0.5 and s["valid"] == 0 and s["finish_reasons"] == {"stop": 1, "length": 1}
    assert s["median_latency_s"] == 2.0 and s["median_tok_s"] == 10.0
