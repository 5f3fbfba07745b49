"""What an operator sees of batch jobs, and how batches end other than ``completed``: the
batch counters in ``/metrics``, one request-log line per batch line, ``failed`` (no line can
run), ``expired`` (the completion window ended: the lines left are in the error file) and the
store's ttl over files and batches.  One server for the module (the scripted model, a SQLite
store whose clock the ttl test moves), real HTTP with the openai SDK."""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from afm_struct.store import open_store
from afm_struct.testing import Script, scripted_loaded_model
from server.live import LiveServer, start_server
from server.settings import ServerSettings

ANSWER = '{"name": "Ada Lovelace", "age": 36}'
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
TTL_S = 3600
ENDPOINT = "/v1/chat/completions"
# Seconds the store's clock runs ahead of the wall clock (the ttl test moves it).
_AHEAD = [0.0]


@pytest.fixture(scope="module")
def live(tokenizer: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    store = open_store(tmp_path_factory.mktemp("batch-ops") / "store.sqlite3", ttl_s=TTL_S,
                       clock=lambda: time.time() + _AHEAD[0])
    loaded = scripted_loaded_model(tokenizer, Script(ANSWER, delay_s=0.003))
    server = start_server(loaded, ServerSettings(batch_lines_in_flight=2), response_store=store)
    yield server
    server.stop()


@pytest.fixture
def c(live: LiveServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", max_retries=0) as sdk:
        yield sdk


def chat_line(custom_id: str, **extra: Any) -> dict[str, Any]:
    body = {"model": "scripted", "messages": [{"role": "user", "content": custom_id}], "max_tokens": 40,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "person", "schema": PERSON, "strict": True}},
            **extra}
    return {"custom_id": custom_id, "method": "POST", "url": ENDPOINT, "body": body}


def create(c: openai.OpenAI, lines: list[Any]) -> Any:
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    file_id = c.files.create(file=("in.jsonl", io.BytesIO(text.encode())), purpose="batch").id
    return c.batches.create(input_file_id=file_id, endpoint=ENDPOINT, completion_window="24h")


def wait(c: openai.OpenAI, batch_id: str, *statuses: str) -> Any:
    deadline = time.monotonic() + 60
    while (batch := c.batches.retrieve(batch_id)).status not in statuses:
        assert time.monotonic() < deadline, f"batch still {batch.status}"
        time.sleep(0.02)
    return batch


def ended(c: openai.OpenAI, batch_id: str) -> Any:
    return wait(c, batch_id, "completed", "failed", "cancelled", "expired")


def jsonl(c: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    return [json.loads(line) for line in c.files.content(file_id).text.splitlines()] if file_id else []


def metrics(live: LiveServer) -> dict[str, float]:
    """The batch samples of /metrics, by their exposition name and labels."""
    text = httpx.get(f"{live.url}/metrics", timeout=10).text
    return {name: float(value) for name, _, value in
            (line.rpartition(" ") for line in text.splitlines() if line.startswith("afm_batch"))}


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.fields: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.fields.append(getattr(record, "afm", {}))


def test_each_line_is_counted_in_metrics_and_logged_with_its_batch(live: LiveServer,
                                                                   c: openai.OpenAI) -> None:
    logger, records = logging.getLogger("afm_struct.requests"), Records()
    logger.addHandler(records)
    level = logger.level
    logger.setLevel(logging.INFO)
    before = metrics(live)
    try:
        lines = [chat_line("good-1"), chat_line("good-2"), chat_line("refused", temperature=7),
                 {**chat_line("other-url"), "url": "/v1/completions"}]
        batch = ended(c, create(c, lines).id)
    finally:
        logger.removeHandler(records)
        logger.setLevel(level)
    assert batch.status == "completed"
    after = metrics(live)

    def grew(sample: str) -> float:
        return after.get(sample, 0.0) - before.get(sample, 0.0)

    started = f'afm_batch_lines_started_total{{endpoint="{ENDPOINT}"}}'
    assert grew(started) == 4
    assert grew(f'afm_batch_lines_ended_total{{endpoint="{ENDPOINT}",result="completed"}}') == 2
    assert grew(f'afm_batch_lines_ended_total{{endpoint="{ENDPOINT}",result="failed"}}') == 2
    assert grew('afm_batches_ended_total{status="completed"}') == 1
    assert after['afm_batches{status="in_progress"}'] == 0
    logged = {f["custom_id"]: f for f in records.fields if f.get("batch_id") == batch.id}
    assert sorted(logged) == ["good-1", "good-2", "other-url", "refused"]
    answers = jsonl(c, batch.output_file_id) + jsonl(c, batch.error_file_id)
    output = {line["custom_id"]: line for line in answers}
    for custom_id, fields in logged.items():
        assert fields["method"] == "BATCH" and fields["tenant"] == "anonymous"
        response = output[custom_id]["response"]
        assert fields["status"] == (response["status_code"] if response else 400)
        if response is not None:  # the log names the line's answer by its request id
            assert fields["request_id"] == response["request_id"]
    good = logged["good-1"]
    assert good["finish_reason"] == "stop" and good["completion_tokens"] > 0 and good["mode"] == "json_schema"
    assert good["endpoint"] == ENDPOINT and good["ttft_s"] > 0
    assert logged["refused"]["error_type"] == "invalid_request_error"
    assert logged["other-url"]["endpoint"] == "/v1/completions"


def test_a_batch_none_of_whose_lines_can_run_fails_with_its_errors(live: LiveServer,
                                                                   c: openai.OpenAI) -> None:
    before = metrics(live)
    created = create(c, ["not JSON", {**chat_line("elsewhere"), "url": "/v1/completions"},
                         {**chat_line("nowhere"), "url": "/v1/embeddings"}, {"custom_id": "no-body"}])
    assert created.status == "failed" and created.failed_at and created.in_progress_at is None
    assert [(e.line, e.code) for e in created.errors.data] == [
        (1, "invalid_json"), (2, "mismatched_url"), (3, "invalid_url"), (4, "missing_required_parameter")]
    assert all(e.message.startswith(f"line {e.line}: ") for e in created.errors.data)
    counts = created.request_counts
    assert (counts.total, counts.completed, counts.failed) == (0, 0, 0)
    batch = c.batches.retrieve(created.id)  # as stored: nothing runs, no file is made
    assert batch.status == "failed" and batch.output_file_id is None and batch.error_file_id is None
    grew = metrics(live)['afm_batches_ended_total{status="failed"}'] - before.get(
        'afm_batches_ended_total{status="failed"}', 0.0)
    assert grew == 1
    # One line that can run is enough: the others are answered in the error file.
    mixed = ended(c, create(c, ["not JSON", chat_line("fine")]).id)
    assert mixed.status == "completed"
    assert (mixed.request_counts.completed, mixed.request_counts.failed) == (1, 1)


def test_a_batch_past_its_window_expires_with_its_lines_left_in_the_error_file(
        live: LiveServer, c: openai.OpenAI) -> None:
    created = create(c, [chat_line(f"doc-{i}") for i in range(80)])
    assert created.expires_at == created.created_at + 24 * 3600
    wait(c, created.id, "in_progress")
    # The window ends now (24 h are not waited for): the runner starts no line after it.
    store = live.app.state.response_store
    past = {"expires_at": int(time.time()) - 1}
    store.update_batch(created.id, "in_progress", past, expect=("in_progress",))
    batch = ended(c, created.id)
    assert batch.status == "expired" and batch.expired_at
    answered = jsonl(c, batch.output_file_id)
    left = jsonl(c, batch.error_file_id)
    assert left
    assert all(line["response"] is None and line["error"]["code"] == "batch_expired" for line in left)
    assert {line["custom_id"] for line in answered}.isdisjoint(line["custom_id"] for line in left)
    assert len(answered) + len(left) == 80
    counts = batch.request_counts
    assert (counts.total, counts.completed, counts.failed) == (80, len(answered), len(left))
    ids = [line["custom_id"] for line in left]
    assert ids == sorted(ids, key=lambda custom_id: int(custom_id.split("-")[1]))  # in line order


def test_files_and_ended_batches_expire_with_the_store_ttl(live: LiveServer, c: openai.OpenAI) -> None:
    store = live.app.state.response_store
    batch = ended(c, create(c, [chat_line("kept-for-a-while")]).id)
    upload = c.files.retrieve(batch.input_file_id)
    assert upload.expires_at is not None and TTL_S < upload.expires_at - upload.created_at <= TTL_S + 2
    assert c.files.retrieve(batch.output_file_id).expires_at is not None
    running = create(c, [chat_line(f"slow-{i}") for i in range(400)])
    try:
        _AHEAD[0] = TTL_S + 5
        for gone in (batch.input_file_id, batch.output_file_id):
            with pytest.raises(openai.NotFoundError):
                c.files.retrieve(gone)
            assert gone not in [f.id for f in c.files.list().data]
        with pytest.raises(openai.NotFoundError):
            c.batches.retrieve(batch.id)
        assert batch.id not in [b.id for b in c.batches.list(limit=100).data]
        # A batch still running is kept (its lines are needed), though as old.
        assert c.batches.retrieve(running.id).status in ("validating", "in_progress")
        c.files.create(file=("new.jsonl", io.BytesIO(json.dumps(chat_line("x")).encode())), purpose="batch")
        assert store.line_runs(batch.id) == []  # the write purged the expired batch's lines
        assert len(store.line_runs(running.id)) == 400
    finally:
        _AHEAD[0] = 0.0
        c.batches.cancel(running.id)
        ended(c, running.id)
