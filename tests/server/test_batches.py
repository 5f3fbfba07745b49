"""The Files and Batches API over real HTTP with the openai SDK, on the scripted model: one
server for the module (two API keys, a SQLite store in a temporary folder)."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from afm_struct.store import open_store
from afm_struct.testing import Script, scripted_loaded_model
from server.live import LiveServer, start_server
from server.settings import ServerSettings

ANSWER = '{"name": "Ada Lovelace", "age": 36}'
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
NAMED = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
KEY_A, KEY_B = "key-tenant-a", "key-tenant-b"


@pytest.fixture(scope="module")
def live(tokenizer: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    store = open_store(tmp_path_factory.mktemp("batches") / "store.sqlite3")
    # A few milliseconds per pass: a batch of a few dozen lines is still running when cancelled.
    loaded = scripted_loaded_model(tokenizer, Script(ANSWER, delay_s=0.003))
    server = start_server(loaded, ServerSettings(api_keys=(KEY_A, KEY_B), batch_lines_in_flight=3),
                          response_store=store)
    yield server
    for c in _CLIENTS:  # no keep-alive connection left for the shutdown to wait on
        c.close()
    server.stop()


_CLIENTS: list[openai.OpenAI] = []


def client(live: LiveServer, key: str = KEY_A) -> openai.OpenAI:
    _CLIENTS.append(openai.OpenAI(base_url=f"{live.url}/v1", api_key=key, max_retries=0))
    return _CLIENTS[-1]


def chat_line(custom_id: str, schema: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "scripted", "messages": [{"role": "user", "content": custom_id}],
                            "max_tokens": 40, **extra}
    if schema is not None:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "out", "schema": schema, "strict": True}}
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}


def upload(c: openai.OpenAI, lines: list[Any]) -> str:
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    return c.files.create(file=("in.jsonl", io.BytesIO(text.encode())), purpose="batch").id


def wait_ended(c: openai.OpenAI, batch_id: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        batch = c.batches.retrieve(batch_id)
        if batch.status in ("completed", "failed", "cancelled", "expired"):
            return batch
        assert time.monotonic() < deadline, f"batch still {batch.status}: {batch.request_counts}"
        time.sleep(0.05)


def read_jsonl(c: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    return [json.loads(line) for line in c.files.content(file_id).text.splitlines()]


def test_round_trip_every_output_line_validates_against_its_schema(live: LiveServer) -> None:
    c = client(live)
    schemas = {f"doc-{i}": (PERSON if i % 2 else NAMED) for i in range(8)}
    lines = [chat_line(cid, schema) for cid, schema in schemas.items()]
    lines.append({"custom_id": "plain-completion", "method": "POST", "url": "/v1/completions",
                  "body": {"model": "scripted", "prompt": "x", "max_tokens": 5}})
    file_id = upload(c, lines)
    assert c.files.retrieve(file_id).purpose == "batch"
    created = c.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions",
                               completion_window="24h", metadata={"job": "people"})
    assert created.status == "validating" and created.request_counts.total == 9
    batch = wait_ended(c, created.id)
    assert batch.status == "completed" and batch.metadata == {"job": "people"}
    assert (batch.request_counts.completed, batch.request_counts.failed) == (8, 1)
    assert batch.in_progress_at and batch.completed_at and batch.finalizing_at
    out = read_jsonl(c, batch.output_file_id)
    assert sorted(line["custom_id"] for line in out) == sorted(schemas)
    for line in out:
        assert line["error"] is None and line["response"]["status_code"] == 200
        assert line["response"]["request_id"] and line["id"].startswith("batch_req_")
        body = line["response"]["body"]
        assert body["object"] == "chat.completion"
        value = json.loads(body["choices"][0]["message"]["content"])
        jsonschema.validate(value, schemas[line["custom_id"]])
    # A line for another endpoint than the batch's is refused in the error file, not run.
    (wrong,) = read_jsonl(c, batch.error_file_id)
    assert wrong["custom_id"] == "plain-completion" and wrong["error"]["code"] == "mismatched_url"
    listed = c.batches.list(limit=100)
    assert created.id in [b.id for b in listed.data]


def test_bad_lines_get_the_endpoints_own_error_and_the_batch_goes_on(live: LiveServer) -> None:
    c = client(live)
    refused = chat_line("refused", temperature=7)
    no_compile = chat_line("no-compile", {"type": "object", "properties": {"a": {"type": "nonsense"}}})
    unknown = {**chat_line("unknown-url"), "url": "/v1/embeddings"}
    lines = ["this is not JSON", chat_line("good-1", PERSON), refused, no_compile, unknown,
             chat_line("good-2", PERSON)]
    batch = c.batches.create(input_file_id=upload(c, lines), endpoint="/v1/chat/completions",
                             completion_window="24h")
    assert [(e.line, e.code) for e in batch.errors.data] == [(1, "invalid_json")]
    batch = wait_ended(c, batch.id)
    assert batch.status == "completed"
    counts = batch.request_counts
    assert (counts.total, counts.completed, counts.failed) == (6, 2, 4)
    assert sorted(line["custom_id"] for line in read_jsonl(c, batch.output_file_id)) == ["good-1", "good-2"]
    errors = {line["custom_id"]: line for line in read_jsonl(c, batch.error_file_id)}
    assert errors[None]["response"] is None and "line 1: not JSON" in errors[None]["error"]["message"]
    assert errors["unknown-url"]["response"]["status_code"] == 404
    # The same bodies sent live answer with the same status and error as their batch lines.
    headers = {"Authorization": f"Bearer {KEY_A}"}
    for line in (refused, no_compile):
        live_answer = httpx.post(f"{live.url}/v1/chat/completions", json=line["body"], headers=headers,
                                 timeout=30)
        got = errors[line["custom_id"]]["response"]
        assert (got["status_code"], got["body"]) == (live_answer.status_code, live_answer.json())
        assert got["status_code"] == 400


def test_cancel_skips_the_lines_not_started(live: LiveServer) -> None:
    c = client(live)
    lines = [chat_line(f"c-{i}", PERSON) for i in range(40)]
    batch = c.batches.create(input_file_id=upload(c, lines), endpoint="/v1/chat/completions",
                             completion_window="24h")
    cancelling = c.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled")
    batch = wait_ended(c, batch.id)
    assert batch.status == "cancelled" and batch.cancelled_at
    counts = batch.request_counts
    assert counts.total == 40 and counts.completed + counts.failed < 40
    assert len(read_jsonl(c, batch.output_file_id)) == counts.completed
    assert c.batches.cancel(batch.id).status == "cancelled"  # an ended batch stays as it is


def test_another_key_gets_404_for_files_and_batches(live: LiveServer) -> None:
    a, b = client(live, KEY_A), client(live, KEY_B)
    file_id = upload(a, [chat_line("mine")])
    batch = a.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h")
    for call in (lambda: b.files.retrieve(file_id), lambda: b.files.content(file_id),
                 lambda: b.files.delete(file_id), lambda: b.batches.retrieve(batch.id),
                 lambda: b.batches.cancel(batch.id),
                 lambda: b.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions",
                                          completion_window="24h")):
        with pytest.raises(openai.NotFoundError):
            call()
    assert file_id not in [f.id for f in b.files.list().data]
    assert batch.id not in [x.id for x in b.batches.list().data]
    wait_ended(a, batch.id)
    assert a.files.delete(file_id).deleted
    with pytest.raises(openai.NotFoundError):
        a.files.retrieve(file_id)


def test_uploads_are_checked(live: LiveServer) -> None:
    c = client(live)
    with pytest.raises(openai.BadRequestError, match="line 2 is not UTF-8"):
        c.files.create(file=("in.jsonl", io.BytesIO(b'{"a": 1}\n\xff\xfe\n')), purpose="batch")
    with pytest.raises(openai.BadRequestError, match="purpose"):
        c.files.create(file=("in.jsonl", io.BytesIO(b"{}\n")), purpose="fine-tune")
    twice = upload(c, [chat_line("same"), chat_line("same")])
    with pytest.raises(openai.BadRequestError, match="line 2 repeats the custom_id 'same'"):
        c.batches.create(input_file_id=twice, endpoint="/v1/chat/completions", completion_window="24h")
    with pytest.raises(openai.BadRequestError, match="endpoint"):
        c.batches.create(input_file_id=twice, endpoint="/v1/embeddings", completion_window="24h")


def test_a_server_without_a_store_says_files_need_one(serve: Any, tmp_path: Path) -> None:
    live = serve(ANSWER)
    r = httpx.get(f"{live.url}/v1/batches", timeout=10)
    assert r.status_code == 400 and r.json()["error"]["code"] == "store_disabled"


def test_a_responses_batch_answers_with_response_objects(live: LiveServer) -> None:
    c = client(live)
    fmt = {"format": {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}}
    lines = [{"custom_id": f"r-{i}", "method": "POST", "url": "/v1/responses",
              "body": {"model": "scripted", "input": f"person {i}", "max_output_tokens": 40, "text": fmt}}
             for i in range(3)]
    batch = c.batches.create(input_file_id=upload(c, lines), endpoint="/v1/responses",
                             completion_window="24h")
    batch = wait_ended(c, batch.id)
    assert batch.status == "completed" and batch.request_counts.completed == 3
    for line in read_jsonl(c, batch.output_file_id):
        body = line["response"]["body"]
        assert body["object"] == "response" and body["status"] == "completed" and body["store"] is False
        (message,) = [item for item in body["output"] if item["type"] == "message"]
        jsonschema.validate(json.loads(message["content"][0]["text"]), PERSON)
