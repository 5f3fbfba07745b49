"""``kill -9`` of a server mid-batch, then a restart on the same store: the batch completes,
no line is lost, and no line whose result was stored runs again (each line's ``runs`` count,
kept in the store, says how often it was started).

The killed server is an ``afm-struct serve`` process; the restart is a server in this process
on the same SQLite file (the same startup path, and a subprocess start costs this suite ~45 s
on a loaded 2-core machine)."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import openai

from afm_struct.store import open_store
from afm_struct.testing import served_scripted_model
from server.live import start_server
from server.settings import ServerSettings

LINES = 24


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


def test_kill_9_mid_batch_then_restart_completes_every_line_once(serve_process, tokenizer: Any,
                                                                 tmp_path: Path) -> None:
    store_path = tmp_path / "store.sqlite3"
    args = ["--model", "scripted:40", "--responses-store", str(store_path), "--batch-lease-s", "1",
            "--max-active", "4"]
    first = serve_process(args)
    first.wait_ready()
    c = _client(first.url)
    text = "".join(json.dumps({"custom_id": f"doc-{i}", "method": "POST", "url": "/v1/chat/completions",
                               "body": {"messages": [{"role": "user", "content": f"document {i}"}],
                                        "max_tokens": 12}}) + "\n" for i in range(LINES))
    file_id = c.files.create(file=("in.jsonl", io.BytesIO(text.encode())), purpose="batch").id
    batch_id = c.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions",
                                completion_window="24h").id
    deadline = time.monotonic() + 60
    while c.batches.retrieve(batch_id).request_counts.completed < 6:
        assert time.monotonic() < deadline, first.stderr()
        time.sleep(0.02)
    first.proc.kill()  # SIGKILL: no drain, no release of the lines in flight
    first.proc.wait(timeout=10)

    store = open_store(store_path)
    try:
        before = {line: result for line, _ok, result in store.line_results(batch_id)}
        running_at_kill = [line for line, state, _ in store.line_runs(batch_id) if state == "running"]
    finally:
        store.close()
    assert 6 <= len(before) < LINES, "the kill came after the batch ended: nothing was resumed"

    second = start_server(served_scripted_model(40, tokenizer=tokenizer),
                          ServerSettings(max_active=4, batch_lease_s=1),
                          response_store=open_store(store_path))
    try:
        c = _client(second.url)
        deadline = time.monotonic() + 60
        while (batch := c.batches.retrieve(batch_id)).status != "completed":
            assert time.monotonic() < deadline and batch.status in ("in_progress", "finalizing"), batch.status
            time.sleep(0.05)
        out = [json.loads(line) for line in c.files.content(batch.output_file_id).text.splitlines()]
    finally:
        second.stop()
    assert (batch.request_counts.total, batch.request_counts.completed) == (LINES, LINES)
    assert sorted(line["custom_id"] for line in out) == sorted(f"doc-{i}" for i in range(LINES))
    assert all(line["response"]["status_code"] == 200 for line in out)

    store = open_store(store_path)
    try:
        runs = {line: count for line, _state, count in store.line_runs(batch_id)}
        after = {line: result for line, _ok, result in store.line_results(batch_id)}
    finally:
        store.close()
    # A line stored before the kill kept its result and was never started again; only the
    # lines in flight at the kill ran twice.
    assert all(after[line] == result and runs[line] == 1 for line, result in before.items())
    assert all(runs[line] == 1 for line in runs if line not in running_at_kill)
    assert all(runs[line] == 2 for line in running_at_kill)
