"""Concurrency under load over real HTTP: bursts, admission, batching, validation (issue: batching)."""

from __future__ import annotations

import asyncio
import json

import jsonschema

from afm_struct.client import Client
from afm_struct.testing import Script, scripted_loaded_model
from afm_struct_bench.serve import SCHEMAS, run_level
from server.live import start_server
from server.settings import ServerSettings


def _script(tokenizer):
    answers = ['{"name": "Ada", "age": 36, "city": "London"}',
               '{"product": "mug", "price": 12.5, "in_stock": true}',
               '{"title": "Bread", "tags": ["baking"]}']

    def pick(prompt_ids):
        text = tokenizer.decode(prompt_ids)
        for i, key in enumerate(("Ada", "mug", "sourdough")):
            if key in text:
                return answers[i]
        return "plain words for a free request"

    return Script(pick, delay_s=0.01)


def test_burst_with_small_queue_completes_or_rejects_before_streaming(tokenizer):
    loaded = scripted_loaded_model(tokenizer, _script(tokenizer))
    live = start_server(loaded, ServerSettings(max_active=4, max_queue=8))
    try:
        run = asyncio.run(run_level(live.url, concurrency=30, n=30, kinds=["free", "json_schema"],
                                    max_tokens=40, seed=0, cancel_every=0))
    finally:
        live.stop()
    assert run["errors"] == 0, run["failures"]
    assert run["invalid"] == 0, run["failures"]
    assert run["completed"] + run["rejected_503"] == 30
    assert run["rejected_503"] > 0  # 30 at once against 4 active + 8 queued
    assert run["completed"] >= 12
    assert run["health_failures"] == 0


def test_concurrent_streams_with_different_schemas_do_not_mix(tokenizer):
    loaded = scripted_loaded_model(tokenizer, _script(tokenizer))
    live = start_server(loaded, ServerSettings(max_active=8, max_queue=8))
    prompts = ["Describe Ada Lovelace.", "A blue mug in stock.", "Tags for sourdough."]
    try:
        async def go():
            from afm_struct.client import AsyncClient

            client = AsyncClient(live.url)
            jobs = []
            for i in range(9):
                k = i % 3
                jobs.append(client.chat(
                    [{"role": "user", "content": prompts[k]}], seed=i, temperature=0.7,
                    response_format={"type": "json_schema", "json_schema": {
                        "name": f"s{k}", "schema": SCHEMAS[k], "strict": True}}))
            results = await asyncio.gather(*jobs)
            await client.aclose()
            return results

        results = asyncio.run(go())
    finally:
        live.stop()
    ids = {r.id for r in results}
    assert len(ids) == 9
    for i, result in enumerate(results):
        assert result.finish_reason == "stop"
        value = json.loads(result.content)
        jsonschema.validate(value, SCHEMAS[i % 3])
        assert set(value) == set(SCHEMAS[i % 3]["properties"])


def test_cancel_inside_a_running_batch(tokenizer):
    # 45 one-token words at 50 ms a step: the streams are still running when the cancel lands.
    words = " ".join(["one", "two", "three"] * 15)
    loaded = scripted_loaded_model(tokenizer, Script(words, delay_s=0.05))
    live = start_server(loaded, ServerSettings(max_active=4))
    try:
        async def go():
            from afm_struct.client import AsyncClient

            client = AsyncClient(live.url)

            async def run(i):
                return await client.chat([{"role": "user", "content": f"count {i}"}],
                                         request_id=f"batch-{i}")

            tasks = [asyncio.create_task(run(i)) for i in range(3)]
            await asyncio.sleep(0.8)
            assert await client.cancel("batch-1")
            results = await asyncio.gather(*tasks)
            await client.aclose()
            return results

        results = asyncio.run(go())
    finally:
        live.stop()
    assert [r.finish_reason for r in results] == ["stop", "cancelled", "stop"]
    assert results[0].content == results[2].content
    assert len(results[1].content) < len(results[0].content)


def test_sync_client_reads_a_stream_from_a_batched_server(tokenizer):
    loaded = scripted_loaded_model(tokenizer, "hello from the batch")
    live = start_server(loaded, ServerSettings(max_active=2))
    try:
        with Client(live.url) as client:
            result = client.chat([{"role": "user", "content": "hi"}], stream_options={"include_usage": True})
    finally:
        live.stop()
    assert result.content == "hello from the batch"
    assert result.usage["completion_tokens"] > 0
