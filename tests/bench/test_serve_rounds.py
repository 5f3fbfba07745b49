"""`bench serve --rounds`: levels run round-robin, ratios within a round, median over rounds."""

from __future__ import annotations

import argparse
import json

from afm_struct.testing import scripted_loaded_model
from afm_struct_bench.serve import run, scaling_summary
from server.live import start_server
from server.settings import ServerSettings


def level(rnd: int, c: int, tok_s: float, p95: float) -> dict:
    return {"round": rnd, "concurrency": c, "throughput_tok_s": tok_s, "ttft_ms": {"p95": p95}}


def test_scaling_summary_takes_ratios_within_each_round():
    runs = [level(1, 1, 10, 100), level(1, 8, 40, 250), level(2, 1, 20, 100), level(2, 8, 90, 400),
            level(3, 1, 10, 50), level(3, 8, 38, 100)]
    s = scaling_summary(runs)
    assert [r["8"]["throughput"] for r in s["by_round"]] == [4.0, 4.5, 3.8]
    assert s["median"]["8"] == {"throughput": 4.0, "ttft_p95": 2.5}
    assert s["median"]["1"] == {"throughput": 1.0, "ttft_p95": 1.0}
    assert scaling_summary([level(1, 8, 40, 250)]) == {}  # no concurrency-1 level: no ratios


def test_rounds_on_a_live_server(tokenizer, tmp_path, capsys):
    live = start_server(scripted_loaded_model(tokenizer, '{"name": "Ada", "age": 36, "city": "Paris"}'),
                        ServerSettings(max_active=4))
    out = tmp_path / "rounds.json"
    try:
        code = run(argparse.Namespace(url=live.url, concurrency="1,2", requests=4, mix="free",
                                      max_tokens=16, seed=0, cancel_every=0, rounds=2, prompts="equal",
                                      out=str(out)))
    finally:
        live.stop()
    assert code == 0
    result = json.loads(out.read_text())
    assert [(r["round"], r["concurrency"]) for r in result["runs"]] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert len(result["scaling_by_round"]) == 2 and set(result["scaling_median"]) == {"1", "2"}
    assert result["scaling"]["1"] == 1.0 and result["prompts"] == "equal"
    assert "median" in capsys.readouterr().out
