"""``afm-struct run-batch`` and ``afm_struct.run_batch``: a JSONL batch answered without a
server, on the scripted model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import afm_struct
import afm_struct.testing
from afm_struct.cli import main
from afm_struct.testing import scripted_loaded_model

PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


def line(custom_id: str, url: str = "/v1/chat/completions", **body: Any) -> str:
    body = {"messages": [{"role": "user", "content": custom_id}], "max_tokens": 30, **body}
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body})


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(text) for text in path.read_text().splitlines()]


def test_library_answers_valid_lines_and_files_the_bad_ones(tokenizer: Any, tmp_path: Path) -> None:
    schema_format = {"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON, "strict": True}}
    good = [line(f"doc-{i}", response_format=schema_format) for i in range(6)]
    completion = json.dumps({"custom_id": "raw", "method": "POST", "url": "/v1/completions",
                             "body": {"prompt": "Name:", "max_tokens": 5}})
    bad = ["{not json", line("refused", temperature=9), line("nowhere", url="/v1/embeddings")]
    (tmp_path / "in.jsonl").write_text("\n".join([*good, completion, *bad]) + "\n")
    model = scripted_loaded_model(tokenizer, '{"name": "Ada", "age": 36}')
    seen: list[int] = []
    summary = afm_struct.run_batch(tmp_path / "in.jsonl", tmp_path / "out.jsonl", model=model,
                                   errors_path=tmp_path / "err.jsonl", concurrency=3,
                                   progress=lambda s: seen.append(s.done))
    assert (summary.valid, summary.downgraded, summary.failed, summary.skipped) == (7, 0, 3, 0)
    assert summary.completion_tokens > 0 and sorted(seen) == list(range(1, 11))
    out = {row["custom_id"]: row for row in read(tmp_path / "out.jsonl")}
    assert sorted(out) == sorted([f"doc-{i}" for i in range(6)] + ["raw"])
    for i in range(6):
        response = out[f"doc-{i}"]["response"]
        assert response["status_code"] == 200
        jsonschema.validate(json.loads(response["body"]["choices"][0]["message"]["content"]), PERSON)
    assert out["raw"]["response"]["body"]["object"] == "text_completion"
    errors = {row["custom_id"]: row for row in read(tmp_path / "err.jsonl")}
    assert errors[None]["error"]["code"] == "invalid_json"
    assert errors["refused"]["response"]["status_code"] == 400
    assert errors["refused"]["response"]["body"]["error"]["param"] == "temperature"
    assert errors["nowhere"]["response"]["status_code"] == 404


def test_cli_resume_skips_answered_lines_and_drops_a_torn_one(tokenizer: Any, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # The CLI's scripted model on the session's tokenizer (not loaded again for each run).
    served = afm_struct.testing.served_scripted_model
    monkeypatch.setattr(afm_struct.testing, "served_scripted_model",
                        lambda rate: served(rate, tokenizer=tokenizer))
    lines = [line(f"doc-{i}") for i in range(10)]
    (tmp_path / "first.jsonl").write_text("\n".join(lines[:4]) + "\n")
    (tmp_path / "all.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.jsonl"
    base = ["run-batch", "-o", str(out), "--model", "scripted:5000", "--concurrency", "4"]
    assert main([*base, "-i", str(tmp_path / "first.jsonl")]) == 0
    first = read(out)
    assert sorted(row["custom_id"] for row in first) == [f"doc-{i}" for i in range(4)]
    with open(out, "a") as f:  # a crash mid-write leaves half a line
        f.write('{"id": "batch_req_torn", "custom_id": "doc-7", "resp')
    capsys.readouterr()
    assert main([*base, "-i", str(tmp_path / "all.jsonl"), "--resume"]) == 0
    rows = read(out)
    assert sorted(row["custom_id"] for row in rows) == sorted(f"doc-{i}" for i in range(10))
    assert rows[:4] == first  # the answered lines are kept as they were, not run again
    err = capsys.readouterr().err
    assert "6/6 lines" in err and "6 valid, 0 downgraded, 0 failed (4 already done)" in err
