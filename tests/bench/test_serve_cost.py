"""`bench serve`'s server cost: CPU seconds per generated token from the server's /metrics, for
several mixes in one run, and their ratios (issue 40)."""

from __future__ import annotations

import argparse
import json

import httpx

from afm_struct.testing import Script, scripted_loaded_model
from afm_struct_bench.report import write_report
from afm_struct_bench.server_cost import cost_fields, mix_comparison, parse_cpu_seconds
from server.live import start_server
from server.settings import ServerSettings
from tests.bench.test_report import PNG_MAGIC


def test_parse_cpu_seconds_reads_the_unlabelled_sample_only():
    text = ("# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n"
            "# TYPE process_cpu_seconds_total counter\n"
            "process_cpu_seconds_total 12.5\nprocess_cpu_seconds_created 3.0\n")
    assert parse_cpu_seconds(text) == 12.5
    assert parse_cpu_seconds("afm_active_rows 3.0\n") is None
    assert cost_fields(1.0, 1.5, 1000) == {"server_cpu_s": 0.5, "server_cpu_us_per_token": 500.0}
    assert cost_fields(None, 1.5, 1000)["server_cpu_us_per_token"] is None
    assert cost_fields(1.0, 1.5, 0)["server_cpu_us_per_token"] is None


def test_mix_comparison_is_per_round_against_the_first_mix():
    def run(rnd, mix, tok_s, cpu):
        return {"round": rnd, "concurrency": 8, "mix": mix, "throughput_tok_s": tok_s,
                "server_cpu_us_per_token": cpu}

    runs = [run(1, "free", 100, 200), run(1, "json_schema", 90, 300),
            run(2, "free", 200, 100), run(2, "json_schema", 200, 110)]
    c = mix_comparison(runs)
    cell = c["mixes"]["json_schema"]["8"]
    assert c["baseline"] == "free"
    assert [x["throughput"] for x in cell["by_round"]] == [0.9, 1.0]
    assert [x["cpu_per_token"] for x in cell["by_round"]] == [1.5, 1.1]
    assert cell["median"] == {"throughput": 0.95, "cpu_per_token": 1.3}
    assert mix_comparison(runs[:1]) == {}


def test_metrics_expose_the_process_cpu_seconds(tokenizer):
    live = start_server(scripted_loaded_model(tokenizer, "hello"), ServerSettings(max_active=2))
    try:
        first = parse_cpu_seconds(httpx.get(f"{live.url}/metrics").text)
        sum(range(3_000_000))  # the server shares this process: its CPU seconds move
        second = parse_cpu_seconds(httpx.get(f"{live.url}/metrics").text)
    finally:
        live.stop()
    assert first is not None and second is not None and second > first


def test_two_mixes_in_one_run_report_cpu_per_token_and_ratios(tokenizer, tmp_path, capsys):
    answer = '{"name": "Ada", "age": 36, "city": "Paris"}'
    live = start_server(scripted_loaded_model(tokenizer, Script(answer, delay_s=0.002)),
                        ServerSettings(max_active=4))
    out = tmp_path / "mixes.json"
    try:
        from afm_struct_bench.serve import run

        code = run(argparse.Namespace(url=live.url, concurrency="2", requests=6, mix="free",
                                      mixes="free;json_schema", max_tokens=24, seed=0, cancel_every=0,
                                      rounds=2, prompts="fixed", out=str(out)))
    finally:
        live.stop()
    assert code == 0
    doc = json.loads(out.read_text())
    assert [(r["round"], r["mix"]) for r in doc["runs"]] == [
        (1, "free"), (1, "json_schema"), (2, "free"), (2, "json_schema")]
    for r in doc["runs"]:
        assert r["tokens"] > 0 and r["server_cpu_s"] > 0
        assert r["server_cpu_us_per_token"] == r["server_cpu_s"] / r["tokens"] * 1e6
    cell = doc["mix_comparison"]["mixes"]["json_schema"]["2"]
    assert len(cell["by_round"]) == 2 and cell["median"]["cpu_per_token"] > 0
    printed = capsys.readouterr().out
    assert "mix vs free" in printed and "server CPU" in printed
    report = write_report([str(out)], tmp_path / "report")
    text = report.read_text()
    assert "server CPU per token" in text and "json_schema" in text
    assert (tmp_path / "report" / "serve_latency.png").read_bytes().startswith(PNG_MAGIC)


def test_the_light_client_reads_what_the_full_client_reads(tokenizer):
    # Same requests, greedy and scripted: the same tokens, completions and validity either way.
    import asyncio

    from afm_struct_bench.light_client import light_stream
    from afm_struct_bench.serve import run_level

    answer = '{"name": "Ada", "age": 36, "city": "Paris"}'
    live = start_server(scripted_loaded_model(tokenizer, answer), ServerSettings(max_active=4))
    try:
        full = asyncio.run(run_level(live.url, 2, 6, ["free", "json_schema"], 24, 0, 0))
        light = asyncio.run(run_level(live.url, 2, 6, ["free", "json_schema"], 24, 0, 0, light=True))

        async def one_text():
            async with httpx.AsyncClient(base_url=live.url) as http:
                return await light_stream(http, [{"role": "user", "content": "hi"}], max_tokens=40,
                                          temperature=0.0, stream_options={"include_usage": True})

        single = asyncio.run(one_text())
    finally:
        live.stop()
    for key in ("completed", "tokens", "errors", "invalid", "by_kind"):
        assert full[key] == light[key], key
    assert light["completed"] == 6 and light["invalid"] == 0 and light["tokens"] > 0
    assert single.content == answer and single.finish_reason == "stop"
    assert single.usage["completion_tokens"] == len(tokenizer.encode(answer))
    assert single.deltas > 1 and single.first_delta_s is not None
