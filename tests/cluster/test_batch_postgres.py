"""Two replicas on one PostgreSQL finish one batch together, each line answered once: their
runners claim lines with ``FOR UPDATE SKIP LOCKED`` and record a result only under their claim."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from afm_struct.store import open_store
from afm_struct.testing import Script, scripted_loaded_model
from server.live import LiveServer, start_server
from server.settings import ServerSettings
from tests.postgres_server import PostgresServer, unavailable_reason

if unavailable_reason() is not None:
    pytest.skip(f"no PostgreSQL: {unavailable_reason()}", allow_module_level=True)

LINES = 30


@pytest.fixture
def replicas(tokenizer: Any) -> Iterator[list[LiveServer]]:
    pg = PostgresServer()
    started: list[LiveServer] = []
    try:
        pg.start()
        url = pg.create_schema("batches")
        for _ in range(2):
            # 10 ms a pass and 40 tokens a line: one replica alone needs >= 4 s for the batch,
            # longer than the other's idle look at the store (runner.IDLE_POLL_S), so both take
            # lines (a 3-token script let the first finish alone on a quiet machine).
            loaded = scripted_loaded_model(tokenizer, Script("shared work " * 40, delay_s=0.01))
            started.append(start_server(loaded, ServerSettings(batch_lines_in_flight=3),
                                        response_store=open_store(url)))
        yield started
    finally:
        for live in started:
            live.stop()
        pg.stop()


def test_two_replicas_share_one_batch_each_line_once(replicas: list[LiveServer]) -> None:
    first, second = (openai.OpenAI(base_url=f"{r.url}/v1", api_key="unused", max_retries=0) for r in replicas)
    try:
        _share(first, second, replicas)
    finally:  # no keep-alive connection left for the shutdown to wait on
        first.close()
        second.close()


def _share(first: openai.OpenAI, second: openai.OpenAI, replicas: list[LiveServer]) -> None:
    text = "".join(json.dumps({"custom_id": f"doc-{i}", "method": "POST", "url": "/v1/chat/completions",
                               "body": {"messages": [{"role": "user", "content": f"doc {i}"}],
                                        "max_tokens": 40}}) + "\n" for i in range(LINES))
    file_id = first.files.create(file=("in.jsonl", io.BytesIO(text.encode())), purpose="batch").id
    batch_id = first.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions",
                                    completion_window="24h").id
    deadline = time.monotonic() + 60
    while (batch := second.batches.retrieve(batch_id)).status != "completed":  # the other replica reads it
        assert time.monotonic() < deadline, batch.status
        time.sleep(0.05)
    assert (batch.request_counts.total, batch.request_counts.completed) == (LINES, LINES)
    out = [json.loads(line) for line in second.files.content(batch.output_file_id).text.splitlines()]
    assert sorted(line["custom_id"] for line in out) == sorted(f"doc-{i}" for i in range(LINES))
    shares = [r.app.state.batch_runner.lines_stored for r in replicas]
    assert sum(shares) == LINES and min(shares) > 0, shares
    runs = [count for _line, _state, count in replicas[0].app.state.response_store.line_runs(batch_id)]
    assert runs == [1] * LINES
