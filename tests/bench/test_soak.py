"""``bench soak``: random mixed traffic against a live scripted server, and its bookkeeping."""

from __future__ import annotations

import asyncio
import random
import sys

from afm_struct.bench.soak import check_output, draw_request, markdown, soak
from afm_struct.client import ChatResult, ToolCall
from afm_struct.testing import Script, scripted_loaded_model
from server.live import start_server
from server.settings import ServerSettings


def test_draws_cover_every_kind_action_and_prompt_shape():
    rng = random.Random(0)
    draws = [draw_request(rng) for _ in range(400)]
    assert {d["kind"] for d in draws} == {"json_schema", "json_object", "tool", "free"}
    assert {d["action"] for d in draws} == {"read", "cancel", "disconnect"}
    assert any(not d["stream"] for d in draws)
    lengths = {len(d["messages"][0]["content"]) for d in draws}
    assert max(lengths) > 1500 and min(lengths) < 80  # long contexts and bare tasks


def test_check_output_tells_invalid_from_cut():
    spec = {"kind": "json_schema", "schema_index": 0, "params": {}}
    ok = ChatResult(content='{"name": "Ada", "age": 36, "city": "London"}', finish_reason="stop")
    assert check_output(spec, ok) == (None, False)
    wrong = ChatResult(content='{"name": "Ada"}', finish_reason="stop")
    assert check_output(spec, wrong)[0].startswith("json_schema: ValidationError")
    cut = ChatResult(content='{"name": "Ad', finish_reason="length")
    assert check_output(spec, cut) == (None, True)
    tool = {"kind": "tool", "schema_index": 0, "params": {}}
    call = ToolCall(index=0, id="c", name="get_weather", arguments='{"city": "Paris", "unit": "celsius"}')
    assert check_output(tool, ChatResult(tool_calls=[call], finish_reason="tool_calls")) == (None, False)
    assert check_output(tool, ChatResult(finish_reason="stop"))[0] == "no tool call"


def test_short_soak_against_a_scripted_server(tokenizer):
    script = Script(lambda ids: '{"name": "Ada", "age": 36, "city": "London"} and more', delay_s=0.005)
    live = start_server(scripted_loaded_model(tokenizer, script), ServerSettings(max_active=4, max_queue=4))
    try:
        report = asyncio.run(soak(live.url, minutes=0.12, concurrency=6, seed=3, burst_every_s=3.0,
                                  burst_size=None))
    finally:
        live.stop()
    assert report["errors"] == 0, report["errors_by_kind"]
    assert report["invalid"] == 0, report["invalid_examples"]
    assert report["outcomes"].get("rejected_503", 0) > 0  # bursts past 4 active + 4 queued
    assert report["outcomes"].get("completed", 0) > 20
    cancels = report["cancels"]
    assert cancels["honoured"] > 0
    assert cancels["honoured"] + cancels["raced_finish"] == cancels["sent"]
    assert report["in_flight_after"] == 0
    if sys.platform == "linux":
        assert report["rss_bytes"]["end"] > 0
    assert "| invalid outputs | 0 |" in markdown(report)


def test_send_flags_streams_that_break_the_contract():
    """A delta after the finish chunk, or no finish chunk, is an error (the assembler allows both)."""
    from afm_struct.bench.soak import send
    from afm_struct.client import StreamEvent

    class Stub:
        def __init__(self, kinds):
            self.kinds = kinds

        async def stream(self, messages, **kwargs):
            for kind in self.kinds:
                data = ChatResult(content="{}", finish_reason="stop") if kind == "done" else {"content": "x"}
                yield StreamEvent(kind, "stop" if kind == "finish" else data)

    spec = {"kind": "free", "action": "read", "stream": True, "after": 99, "messages": [], "params": {}}

    def outcome(kinds):
        return asyncio.run(send(Stub(kinds), spec))

    assert outcome(["delta", "finish", "done"])["outcome"] == "completed"
    assert outcome(["delta", "finish", "delta", "done"])["error"] == "protocol: delta after the finish chunk"
    twice = outcome(["delta", "finish", "finish", "done"])
    assert twice["error"] == "protocol: finish after the finish chunk"
    assert outcome(["delta", "done"])["error"] == "protocol: 0 finish chunks"
