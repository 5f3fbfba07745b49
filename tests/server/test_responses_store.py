"""Stored responses over real HTTP on the scripted model, with the SQLite store: store by default,
previous_response_id across turns and across a restart, GET / DELETE / input_items, cancel,
and tenants: another key's id is a 404 like an unknown one."""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from afm_struct.store import open_store
from afm_struct.testing import Script, scripted_loaded_model
from server.live import LiveServer, start_server
from server.settings import ServerSettings

from .conftest import wait_until
from .responses_client import post, stream_events

KEY_A, KEY_B = "key-a-123", "key-b-456"
A, B = {"Authorization": f"Bearer {KEY_A}"}, {"Authorization": f"Bearer {KEY_B}"}


@pytest.fixture
def stored(tokenizer: Any, tmp_path: Path) -> Iterator[Callable[..., LiveServer]]:
    """Factory: a scripted server with the SQLite store at ``tmp_path`` (the same file each
    time: a second call is the server restarted), keys A and B."""
    started: list[LiveServer] = []

    def make(script: Script | str = "Hello there, world!") -> LiveServer:
        for live in started:
            live.stop()
        live = start_server(scripted_loaded_model(tokenizer, script), ServerSettings(api_keys=(KEY_A, KEY_B)),
                            response_store=open_store(tmp_path / "responses.sqlite3"))
        started.append(live)
        return live

    yield make
    for live in started:
        live.stop()


def echo_script(tokenizer: Any) -> Script:
    """Says which marker words the prompt holds (so a test sees what a turn was rendered from)."""
    def answer(ids: list[int]) -> str:
        prompt = tokenizer.decode(ids)
        return " ".join(w for w in ("FIRST-TURN", "SECOND-TURN", "THIRD-TURN") if w in prompt) or "none"
    return Script(answer)


def test_stored_by_default_and_retrieved_deleted_listed(stored) -> None:
    live = stored()
    body = post(live.url, {"input": "FIRST-TURN", "metadata": {"k": "v"}}, A).json()
    assert body["store"] is True
    got = httpx.get(f"{live.url}/v1/responses/{body['id']}", headers=A)
    assert got.status_code == 200 and got.json() == body
    head = httpx.head(f"{live.url}/v1/responses/{body['id']}", headers=A)
    assert head.status_code == 200 and head.content == b""
    options = httpx.options(f"{live.url}/v1/responses/{body['id']}", headers=A)
    assert options.headers["allow"] == "DELETE, GET, HEAD, OPTIONS"
    items = httpx.get(f"{live.url}/v1/responses/{body['id']}/input_items", headers=A).json()
    assert items["object"] == "list" and items["has_more"] is False
    assert [i["content"] for i in items["data"]] == [[{"type": "input_text", "text": "FIRST-TURN"}]]
    assert items["first_id"] == items["data"][0]["id"]
    deleted = httpx.delete(f"{live.url}/v1/responses/{body['id']}", headers=A)
    assert deleted.json() == {"id": body["id"], "object": "response", "deleted": True}
    for method in ("GET", "DELETE"):
        r = httpx.request(method, f"{live.url}/v1/responses/{body['id']}", headers=A)
        assert r.status_code == 404 and body["id"] in r.json()["error"]["message"]
    r = post(live.url, {"input": "x", "previous_response_id": body["id"]}, A)
    assert r.status_code == 404 and r.json()["error"]["param"] == "previous_response_id"


def test_store_false_is_not_kept(stored) -> None:
    live = stored()
    body = post(live.url, {"input": "hi", "store": False}, A).json()
    assert body["store"] is False
    assert httpx.get(f"{live.url}/v1/responses/{body['id']}", headers=A).status_code == 404


def test_a_streamed_response_is_kept_whole(stored) -> None:
    live = stored()
    _, events = stream_events(live.url, {"input": "hi"}, A)
    final = events[-1]["response"]
    assert httpx.get(f"{live.url}/v1/responses/{final['id']}", headers=A).json() == final


def test_previous_response_id_continues_the_conversation_across_a_restart(stored, tokenizer) -> None:
    live = stored(echo_script(tokenizer))
    first = post(live.url, {"input": "FIRST-TURN"}, A).json()
    second = post(live.url, {"input": "SECOND-TURN", "previous_response_id": first["id"]}, A).json()
    assert second["output"][0]["content"][0]["text"] == "FIRST-TURN SECOND-TURN"
    assert second["previous_response_id"] == first["id"]
    live = stored(echo_script(tokenizer))  # the server restarted on the same store file
    assert httpx.get(f"{live.url}/v1/responses/{second['id']}", headers=A).json() == second
    third = post(live.url, {"input": "THIRD-TURN", "previous_response_id": second["id"]}, A).json()
    assert third["output"][0]["content"][0]["text"] == "FIRST-TURN SECOND-TURN THIRD-TURN"


def test_sdk_previous_response_id_over_two_turns(stored, tokenizer) -> None:
    live = stored(echo_script(tokenizer))
    client = openai.OpenAI(base_url=f"{live.url}/v1", api_key=KEY_A, max_retries=0)
    first = client.responses.create(input="FIRST-TURN")
    second = client.responses.create(input="SECOND-TURN", previous_response_id=first.id)
    assert second.output_text == "FIRST-TURN SECOND-TURN"
    assert client.responses.retrieve(second.id).output_text == second.output_text
    assert [i.type for i in client.responses.input_items.list(second.id)] == ["message"]
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)


def test_another_tenants_id_is_404_like_an_unknown_one(stored) -> None:
    live = stored()
    mine = post(live.url, {"input": "hi"}, A).json()["id"]
    for method, path in (("GET", ""), ("DELETE", ""), ("GET", "/input_items")):
        theirs = httpx.request(method, f"{live.url}/v1/responses/{mine}{path}", headers=B)
        unknown = httpx.request(method, f"{live.url}/v1/responses/resp_nope{path}", headers=B)
        assert theirs.status_code == unknown.status_code == 404
        assert theirs.json()["error"]["message"].replace(mine, "ID") == \
            unknown.json()["error"]["message"].replace("resp_nope", "ID")
    r = post(live.url, {"input": "x", "previous_response_id": mine}, B)
    assert r.status_code == 404 and r.json()["error"]["param"] == "previous_response_id"
    assert httpx.get(f"{live.url}/v1/responses/{mine}", headers=A).status_code == 200


def test_input_items_pages(stored) -> None:
    live = stored()
    items = [{"role": "user", "content": f"part {i}"} for i in range(3)]
    rid = post(live.url, {"input": items}, A).json()["id"]
    url = f"{live.url}/v1/responses/{rid}/input_items"
    page = httpx.get(url, params={"limit": 2, "order": "asc"}, headers=A).json()
    assert [i["content"][0]["text"] for i in page["data"]] == ["part 0", "part 1"] and page["has_more"]
    rest = httpx.get(url, params={"limit": 2, "order": "asc", "after": page["last_id"]}, headers=A).json()
    assert [i["content"][0]["text"] for i in rest["data"]] == ["part 2"] and not rest["has_more"]
    for params, param in (({"limit": "x"}, "limit"), ({"limit": 0}, "limit"), ({"order": "up"}, "order")):
        r = httpx.get(url, params=params, headers=A)
        assert r.status_code == 400 and r.json()["error"]["param"] == param


def test_cancel_a_running_response(stored) -> None:
    live = stored(Script("word " * 400, delay_s=0.02))
    ids: queue.Queue[str] = queue.Queue()
    events: list[dict[str, Any]] = []

    def consume() -> None:
        with httpx.stream("POST", f"{live.url}/v1/responses", json={"input": "hi", "stream": True},
                          headers=A, timeout=60) as response:
            for line in response.iter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[len("data: "):]))
                    if len(events) == 1:
                        ids.put(events[0]["response"]["id"])

    reader = threading.Thread(target=consume)
    reader.start()
    rid = ids.get(timeout=30)
    assert httpx.post(f"{live.url}/v1/responses/{rid}/cancel", headers=B).status_code == 404
    r = httpx.post(f"{live.url}/v1/responses/{rid}/cancel", headers=A)
    assert r.status_code == 200 and r.json()["id"] == rid and r.json()["status"] == "cancelled"
    reader.join(30)
    assert events[-1]["type"] == "response.incomplete" and events[-1]["response"]["status"] == "cancelled"
    assert len(events) < 400  # stopped long before the script's end
    assert wait_until(lambda: httpx.get(f"{live.url}/v1/responses/{rid}", headers=A).status_code == 200)
    assert httpx.get(f"{live.url}/v1/responses/{rid}", headers=A).json()["status"] == "cancelled"
    assert httpx.post(f"{live.url}/v1/responses/{rid}/cancel", headers=A).status_code == 404


def test_without_a_store_the_stored_routes_are_404(serve) -> None:
    live = serve()
    for method, path in (("GET", ""), ("DELETE", ""), ("GET", "/input_items"), ("POST", "/cancel")):
        assert httpx.request(method, f"{live.url}/v1/responses/resp_x{path}").status_code == 404


class BrokenStore:
    """A store whose writes fail as a database that went away does (503 store_unavailable)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def put(self, response: Any) -> Any:
        from afm_struct.store import StoreError
        raise StoreError("the response store cannot be written: disk full")


def test_a_store_failure_is_503_before_headers_and_logged_after(tokenizer, tmp_path, caplog) -> None:
    live = start_server(scripted_loaded_model(tokenizer, "Hello"),
                        response_store=BrokenStore(open_store(tmp_path / "r.sqlite3")))
    try:
        r = post(live.url, {"input": "hi"})
        assert r.status_code == 503 and r.json()["error"]["code"] == "store_unavailable"
        _, events = stream_events(live.url, {"input": "hi"})
        assert events[-1]["type"] == "response.completed"  # the answer stands, unkept
        assert wait_until(lambda: "was not stored" in caplog.text)
    finally:
        live.stop()
