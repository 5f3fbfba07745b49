"""``bench report`` over small synthetic results of every kind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from afm_struct_bench.report import collect, detect_kind, write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _masks(backend: str, per_schema: bool) -> dict:
    pct = {"p50": 1200.0, "p90": 5400.0, "p99": 20000.0}
    doc = {"backend": backend, "schemas": 3, "enforced": 2, "downgraded": 1, "compile_error": 0,
           "validation_error": 0, "invalidation_error": 0, "compile_us": pct,
           "mask_us": {"p50": 40.0, "p90": 90.0, "p99": 300.0}, "cached_compile_us": pct}
    if per_schema:
        doc["per_schema"] = [{"file": f"s{i}.json", "compile_us": 1000.0 * (i + 1) ** 2} for i in range(5)]
    return doc


def _decode() -> dict:
    modes = ("free", "constrained", "constrained_ff")
    engine = {"tok_s": dict(zip(modes, (20.0, 17.5, 24.0), strict=True)),
              "ttft_ms": dict(zip(modes, (80.0, 95.0, 96.0), strict=True)),
              "valid_json_rate": dict(zip(modes, (0.4, 1.0, 1.0), strict=True)),
              "schema_valid_rate": dict(zip(modes, (0.2, 1.0, 1.0), strict=True))}
    return {"free_tok_s": 20.0, "constrained_tok_s": 17.5, "constrained_ff_tok_s": 24.0,
            "ttft_ms": engine["ttft_ms"], "valid_json_rate": engine["valid_json_rate"],
            "schema_valid_rate": engine["schema_valid_rate"],
            "per_engine": {"llguidance": engine, "outlines": {**engine, "tok_s": {"free": 20.0,
                                                                                 "constrained": 12.0}}}}


def _extract() -> dict:
    def mode(json_ok: float, acc: float) -> dict:
        return {"tasks": 2, "json_valid_rate": json_ok, "schema_valid_rate": json_ok / 2,
                "sanitized_json_valid_rate": json_ok, "sanitized_schema_valid_rate": json_ok / 2,
                "field_accuracy": acc, "field_accuracy_sanitized": acc, "exact_tasks": 0,
                "fields_matched": 3, "fields_total": 10, "finish_reasons": {"stop": 2}}
    return {"benchmark": "extract", "model": "tiny", "tasks": 2, "settings": {"seed": 0},
            "summary": {"free": mode(0.5, 0.3), "constrained": mode(1.0, 0.6)},
            "per_category": {"invoice": {"free": 0.2, "constrained": 0.5}}, "per_task": []}


ENV = {"time_utc": "2026-12-07T15:00:00Z", "cpu": "Test CPU <9000>", "cores": 2, "mlx_device": "cpu",
       "blas": "openblas", "versions": {"mlx": "0.31.0"}, "command": "afm-struct bench serve"}


def _serve() -> dict:
    return {"environment": ENV,
            "runs": [{"concurrency": c, "throughput_tok_s": 20.0 * c ** 0.5, "errors": 0, "downgrades": 0,
                      "ttft_ms": {"p50": 50.0 * c, "p95": 80.0 * c, "p99": 99.0 * c},
                      "latency_ms": {"p50": 900.0 * c, "p95": 1200.0 * c, "p99": 1500.0 * c}}
                     for c in (1, 2, 4, 8)]}


@pytest.fixture
def results(tmp_path: Path) -> Path:
    folder = tmp_path / "results"
    folder.mkdir()
    docs = {"masks_llg.json": _masks("llguidance", True), "masks_outlines.json": _masks("outlines", True),
            "decode.json": _decode(), "extract.json": _extract(), "serve.json": _serve(),
            "speed.json": {"blas": "openblas", "runs": 5}, "notes.json": [1, 2]}
    for name, doc in docs.items():
        (folder / name).write_text(json.dumps(doc))
    (folder / "broken.json").write_text("{not json")
    return folder


def test_detect_kind() -> None:
    assert detect_kind(_masks("x", False)) == "masks"
    assert detect_kind(_decode()) == "decode"
    assert detect_kind(_extract()) == "extract"
    assert detect_kind(_serve()) == "serve"
    assert detect_kind({"runs": 5}) is None and detect_kind([]) is None


def test_collect_skips_unknown(results: Path, caplog: pytest.LogCaptureFixture) -> None:
    found = collect([str(results)])
    counts = {k: len(v) for k, v in found.items()}
    assert counts == {"masks": 2, "decode": 1, "extract": 1, "serve": 1, "soak": 0}
    assert [label for label, _ in found["masks"]] == ["llguidance", "outlines"]
    assert sum("skipping" in r.message for r in caplog.records) == 3
    (results / "masks_llg_again.json").write_text(json.dumps(_masks("llguidance", False)))
    again = collect([str(results)])["masks"]
    assert [label for label, _ in again] == ["masks_llg", "masks_llg_again", "masks_outlines"]


def test_report_has_every_section_and_valid_pngs(results: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    report = write_report([str(results)], out)
    text = report.read_text()
    for title in ("bench masks", "bench decode", "bench extract", "bench serve"):
        assert title in text
    assert "could not render" not in text
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == ["decode_tok_s.png", "decode_validity.png", "extract_categories.png",
                    "extract_validity.png", "masks_compile.png", "masks_mask.png", "serve_latency.png"]
    for name in pngs:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000, name
        assert f"({name})" in text
    _check_html(out)


def test_report_robust_to_missing_kinds_and_percentile_only_masks(tmp_path: Path) -> None:
    (tmp_path / "m.json").write_text(json.dumps(_masks("llguidance", False)))
    (tmp_path / "s.json").write_text(json.dumps({"runs": [{"concurrency": 1}]}))  # sparse serve run
    report = write_report([str(tmp_path / "m.json"), str(tmp_path / "s.json")], tmp_path / "out")
    text = report.read_text()
    assert "bench masks" in text and "bench serve" in text and "bench extract" not in text
    assert (tmp_path / "out" / "masks_compile.png").read_bytes().startswith(PNG_MAGIC)
    empty = write_report([], tmp_path / "empty").read_text()
    assert "No benchmark results found" in empty


def test_cli_report(results: Path, tmp_path: Path) -> None:
    out = tmp_path / "cli"
    cli = [sys.executable, "-m", "afm_struct.cli", "bench", "report"]
    inputs = [str(results / "serve.json"), str(results / "extract.json")]
    proc = subprocess.run([*cli, *inputs, "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (out / "report.md").exists() and (out / "serve_latency.png").exists()
    missing = subprocess.run([*cli, str(tmp_path / "nope.json"), "--out", str(out)], capture_output=True,
                             text=True, timeout=120)
    assert missing.returncode == 2


def _soak_hostile() -> dict:
    from afm_struct_bench.soak import Hostility
    from afm_struct_bench.soak_summary import summarize

    rows = [{"kind": "free", "action": "read", "stream": True, "rid": "soak-1", "hostile": False,
             "status": 200, "outcome": "error", "error": "stream_error:generation_failed",
             "t0": 1.0, "t1": 2.0},
            {"kind": "json_schema", "action": "read", "stream": False, "rid": "soak-2", "hostile": False,
             "status": 200, "outcome": "completed", "finish": "length", "invalid": None,
             "length_invalid": "json_schema: JSONDecodeError: x", "downgraded": False, "t0": 0.0, "t1": 3.0},
            {"kind": "pattern_schema", "variant": "a{1000000}", "rid": "hostile-1", "hostile": True,
             "status": 500, "result": "5xx", "error": "server_error:generation_failed", "t0": 0.5, "t1": 1.9}]
    samples = [(0.0, 100 << 20, 0.01, None), (60.0, 200 << 20, 0.01, None), (120.0, 230 << 20, 0.02, None)]
    return summarize(rows, url="u", minutes=2.0, concurrency=8, seed=0, wall=120.0,
                     rss={"start": 100 << 20, "warm": 200 << 20, "end": 230 << 20}, samples=samples,
                     in_flight_after=0, hostility=Hostility(0.3, ("pattern_schema",)), hostile_info={},
                     limits={})


def test_report_renders_soak_runs_old_and_hostile(tmp_path: Path) -> None:
    old = {"url": "u", "minutes": 30.0, "concurrency": 8, "seed": 17, "wall_s": 1800.0, "requests": 10,
           "outcomes": {"completed": 10}, "errors_by_kind": {}, "errors": 0, "invalid": 0,
           "invalid_examples": [], "cut_unparseable": 2, "by_kind": {"free": 10},
           "cancels": {"sent": 0, "honoured": 0, "raced_finish": 0, "acknowledged": 0},
           "ttft_ms": {"p50": 10.0, "p95": 20.0, "p99": 30.0},
           "rss_bytes": {"start": 1, "warm": 100, "end": 104}, "rss_growth_from_warm": 0.04,
           "in_flight_after": 0}
    new = _soak_hostile()
    assert detect_kind(old) == detect_kind(new) == "soak"
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "hostile.json").write_text(json.dumps(new))
    paths = [str(tmp_path / "old.json"), str(tmp_path / "hostile.json")]
    text = write_report(paths, tmp_path / "out").read_text()
    assert "bench soak" in text and "could not render" not in text
    assert "| RSS end / warm | 1.040 (+4.0%) |" in text  # the old file, from its growth
    assert "| RSS end / warm | 1.150 (+15.0%) |" in text
    assert "ordinary_harmed_0 FAIL" in text and "| pattern_schema | 1 |" in text
    assert "| soak-1 | free | stream_error:generation_failed | 1.0-2.0 | 1 (1) |" in text
    assert (tmp_path / "out" / "soak_rss.png").read_bytes().startswith(PNG_MAGIC)


def _check_html(out: Path) -> None:
    """report.html beside report.md: every plot embedded as a PNG, the tables, the environment
    of the runs (the fixture's serve file), and no reference to any other file."""
    import base64
    import re
    from html.parser import HTMLParser

    page = (out / "report.html").read_text()

    class Refs(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.srcs: list[str] = []
            self.tags: list[str] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            self.tags.append(tag)
            self.srcs += [v or "" for k, v in attrs if k in ("src", "href")]

    refs = Refs()
    refs.feed(page)
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert len(refs.srcs) == len(pngs) == 7  # one embedded image per plot, nothing else linked
    for src in refs.srcs:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]).startswith(PNG_MAGIC)
    assert refs.tags.count("table") >= 5 and "h2" in refs.tags
    assert "<th>cpu</th><td>Test CPU &lt;9000&gt;</td>" in page  # the environment, escaped
    assert "<th>versions: mlx</th><td>0.31.0</td>" in page and "<code>serve</code>" in page
    assert not re.search(r"\((?:\w+)\.png\)", page)  # no Markdown image left unrendered
