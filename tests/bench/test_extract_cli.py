"""``afm-struct bench extract --limit 2`` end to end on the real embedded model (a subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


# Small bounded schemas (enums and booleans only) so the run stays fast on a busy
# CPU and the constrained output always fits the token budget.
def _task(id_: str, source: str, properties: dict, expected: dict) -> dict:
    schema = {"type": "object", "properties": properties, "required": list(properties),
              "additionalProperties": False}
    return {"id": id_, "category": "test", "source": source, "schema": schema, "expected": expected}


BOOL = {"type": "boolean"}
TASKS = [
    _task("t_ticket", "Ticket 7: the login page is down for all users since 09:00. Severity is critical. "
          "A restart did not help; no data was lost.",
          {"severity": {"enum": ["low", "high", "critical"]}, "data_lost": BOOL, "resolved": BOOL},
          {"severity": "critical", "data_lost": False, "resolved": False}),
    _task("t_pets", "Rental flat in Leeds with 2 bedrooms. Cats are welcome, dogs are not. "
          "The flat is unfurnished.",
          {"cats": BOOL, "dogs": BOOL, "furnished": BOOL}, {"cats": True, "dogs": False, "furnished": False}),
    _task("t_unused", "not run", {"x": BOOL}, {"x": True}),
]


@pytest.mark.model
@pytest.mark.timeout(300)
def test_bench_extract_limit_2(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps(TASKS))
    out = tmp_path / "extract.json"
    proc = subprocess.run(
        [sys.executable, "-m", "afm_struct.cli", "bench", "extract", "--tasks", str(tasks), "--limit", "2",
         "--max-tokens", "40", "--seed", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "| constrained |" in proc.stdout and "| free |" in proc.stdout
    report = json.loads(out.read_text())
    for key in ("benchmark", "model", "settings", "summary", "per_category", "per_task", "environment"):
        assert key in report
    assert report["benchmark"] == "extract" and report["tasks"] == 2
    assert set(report["summary"]) == {"free", "constrained"}
    constrained = report["summary"]["constrained"]
    assert constrained["json_valid_rate"] == 1.0
    assert constrained["schema_valid_rate"] == 1.0
    assert report["settings"]["seed"] == 1 and report["settings"]["max_tokens"] == 40
    assert "mlx_device" in report["environment"]
    for row in report["per_task"]:
        assert {"text", "json_valid", "schema_valid", "fields_matched", "fields_total"} <= set(row["free"])
        assert row["constrained"]["schema_valid"] is True
