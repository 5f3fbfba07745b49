"""The Responses API to the Open Responses specification, over real HTTP on the scripted model:
every required field of the response object on every route (create, stream events, retrieve,
cancel, compact) against the spec's JSON Schema (tests/fixtures/openresponses), the request
fields ``presence_penalty`` / ``frequency_penalty`` / ``max_tool_calls`` / ``truncation``,
``POST /v1/responses/compact``, the WebSocket handshake refused, and no U+FFFD where a budget
cuts inside a character, on every protocol."""

from __future__ import annotations

import functools
import json
import queue
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import mlx.core as mx
import pytest
import websockets.sync.client
from websockets.exceptions import InvalidStatus

from afm_struct.decoding.sampling import make_additive_penalties
from afm_struct.store import open_store
from afm_struct.testing import Script, scripted_loaded_model
from server.live import LiveServer, start_server
from server.responses.storage import record
from server.settings import ServerSettings

from .conftest import wait_until
from .responses_client import post, stream_events
from .test_responses_http import CALL, WEATHER

# The spec's schemas (the response object, the compacted one, every streaming event), with
# where they come from: tests/fixtures/openresponses/spec_schemas.json's "source".
SPEC = json.loads((Path(__file__).parents[1] / "fixtures/openresponses/spec_schemas.json").read_text())
# ResponseResource's required list in the spec itself (schema/components/schemas/
# ResponseResource.json at openresponses/openresponses 3452c0125645c81acc7690ebb612b6cb1000e19f),
# which also has ``user``.
REQUIRED = ("id", "object", "created_at", "completed_at", "status", "incomplete_details", "model",
            "previous_response_id", "instructions", "output", "error", "tools", "tool_choice",
            "truncation", "parallel_tool_calls", "text", "top_p", "presence_penalty",
            "frequency_penalty", "top_logprobs", "temperature", "reasoning", "user", "usage",
            "max_output_tokens", "max_tool_calls", "store", "background", "service_tier", "metadata",
            "safety_identifier", "prompt_cache_key")


@functools.cache
def _validator(schema: str) -> Any:
    """One validator per spec schema (``jsonschema.validate`` checked the whole of the spec's
    ``$defs`` against the meta-schema on every call: ~0.3 s an event)."""
    whole = {"$ref": f"#/$defs/{schema}", "$defs": SPEC["$defs"]}
    cls = jsonschema.validators.validator_for(whole)
    cls.check_schema(whole)
    return cls(whole)


def conforms(value: dict[str, Any], schema: str = "ResponseResource") -> None:
    """``value`` validates against the spec's schema named ``schema`` (every required field,
    its type, the nested items)."""
    error = jsonschema.exceptions.best_match(_validator(schema).iter_errors(value))
    if error is not None:
        raise error
    if schema == "ResponseResource":
        assert not set(REQUIRED) - set(value), set(REQUIRED) - set(value)


def events_conform(events: list[dict[str, Any]]) -> None:
    """Every streamed event validates against the spec's schema of its type."""
    for event in events:
        conforms(event, SPEC["events"][event["type"]])


@pytest.fixture
def stored(tokenizer: Any, tmp_path: Path) -> Iterator[Callable[..., LiveServer]]:
    """Factory: a scripted server with the SQLite response store."""
    started: list[LiveServer] = []

    def make(script: Script | str = "Hello there, world!", **settings: Any) -> LiveServer:
        live = start_server(scripted_loaded_model(tokenizer, script), ServerSettings(**settings),
                            response_store=open_store(tmp_path / f"r{len(started)}.sqlite3"))
        started.append(live)
        return live

    yield make
    for live in started:
        live.stop()


# -- the response object ---------------------------------------------------------------------


def test_defaults_are_the_values_in_effect_on_create_stream_and_retrieve(stored):
    live = stored("Hello")
    body = post(live.url, {"model": "scripted", "input": "hi"}).json()
    conforms(body)
    assert (body["temperature"], body["top_p"], body["top_logprobs"]) == (1.0, 1.0, 0)
    assert (body["presence_penalty"], body["frequency_penalty"], body["max_tool_calls"]) == (0.0, 0.0, None)
    assert body["truncation"] == "disabled"
    response, events = stream_events(live.url, {"input": "hi", "temperature": 0, "top_logprobs": 2,
                                                "presence_penalty": 0.5, "max_tool_calls": 3})
    assert response.status_code == 200
    events_conform(events)
    carrying = [e for e in events if "response" in e]
    assert [e["type"] for e in carrying] == ["response.created", "response.in_progress", "response.completed"]
    for event in carrying:
        conforms(event["response"])
        assert event["response"]["temperature"] == 0.0 and event["response"]["top_logprobs"] == 2
        assert event["response"]["presence_penalty"] == 0.5 and event["response"]["max_tool_calls"] == 3
    rid = carrying[-1]["response"]["id"]
    assert wait_until(lambda: httpx.get(f"{live.url}/v1/responses/{rid}").status_code == 200)
    again = httpx.get(f"{live.url}/v1/responses/{rid}").json()
    conforms(again)
    assert again["presence_penalty"] == 0.5 and again["top_p"] == 1.0


def test_a_response_stored_before_the_fields_were_stated_is_retrieved_with_the_defaults(tokenizer, tmp_path):
    # A record as the store kept it before: no penalties or max_tool_calls, null sampling fields.
    store = open_store(tmp_path / "old.sqlite3")
    old = {"id": "resp_old", "object": "response", "created_at": 1796404789, "status": "completed",
           "completed_at": 1796404790, "error": None, "incomplete_details": None, "output": [],
           "usage": None, "model": "scripted", "instructions": None, "metadata": {},
           "max_output_tokens": None, "temperature": None, "top_p": None, "top_logprobs": None,
           "parallel_tool_calls": True, "tool_choice": "none", "tools": [],
           "text": {"format": {"type": "text"}, "verbosity": "medium"},
           "reasoning": {"effort": None, "summary": None}, "truncation": "disabled", "store": True,
           "previous_response_id": None, "background": False, "service_tier": "default", "user": None,
           "safety_identifier": None, "prompt_cache_key": None}
    store.put(record("anonymous", old, []))
    live = start_server(scripted_loaded_model(tokenizer, "Hi"), response_store=store)
    try:
        body = httpx.get(f"{live.url}/v1/responses/resp_old").json()
    finally:
        live.stop()
    conforms(body)
    assert (body["temperature"], body["top_p"], body["top_logprobs"], body["presence_penalty"],
            body["max_tool_calls"]) == (1.0, 1.0, 0, 0.0, None)


def test_a_cancelled_response_conforms(stored):
    live = stored(Script("word " * 400, delay_s=0.02))
    ids: queue.Queue[str] = queue.Queue()
    events: list[dict[str, Any]] = []

    def consume() -> None:
        with httpx.stream("POST", f"{live.url}/v1/responses", json={"input": "hi", "stream": True},
                          timeout=60) as response:
            for line in response.iter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[len("data: "):]))
                    if len(events) == 1:
                        ids.put(events[0]["response"]["id"])

    reader = threading.Thread(target=consume)
    reader.start()
    rid = ids.get(timeout=30)
    r = httpx.post(f"{live.url}/v1/responses/{rid}/cancel")
    reader.join(30)
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    conforms(r.json())
    events_conform(events)


# -- request fields --------------------------------------------------------------------------


def test_additive_penalties_follow_openais_formula():
    process = make_additive_penalties(presence=0.5, frequency=0.25)
    logits = mx.zeros((1, 6), dtype=mx.float32)
    out = process([2, 2, 4], logits)
    assert out.tolist()[0] == [0.0, 0.0, -1.0, 0.0, -0.75, 0.0]
    # counts grow with the tokens, read once each
    out = process([2, 2, 4, 4], mx.zeros((1, 6), dtype=mx.float32))
    assert out.tolist()[0] == [0.0, 0.0, -1.0, 0.0, -1.0, 0.0]
    assert process.idle([]) and not process.idle([1])  # type: ignore[attr-defined]


def test_a_frequency_penalty_changes_what_is_sampled(serve):
    # Greedy on a script that repeats one word (the scripted model favours its next token by 30
    # logits): after ~14 repeats the penalty (2 per repeat, 2 once) outweighs that and the model
    # leaves the script.
    script = "ha" + " ha" * 39
    live = serve(script)
    plain = post(live.url, {"input": "hi", "temperature": 0, "max_output_tokens": 30}).json()
    penalized = post(live.url, {"input": "hi", "temperature": 0, "max_output_tokens": 30,
                                "frequency_penalty": 2, "presence_penalty": 2}).json()
    text = [b["output"][0]["content"][0]["text"] for b in (plain, penalized)]
    assert script.startswith(text[0]) and text[0].count("ha") == 30, text
    assert not script.startswith(text[1]) and text[1].startswith("ha ha ha ha ha"), text


def test_max_tool_calls_ends_the_turn_after_that_many_calls(serve):
    live = serve(CALL + "\n" + CALL.replace("Paris", "Rome") + "\n" + CALL.replace("Paris", "Oslo"))
    spent = []
    for limit, cities in ((1, ["Paris"]), (2, ["Paris", "Rome"]), (None, ["Paris", "Rome", "Oslo"])):
        extra = {} if limit is None else {"max_tool_calls": limit}
        body = post(live.url, {"input": "weather?", "tools": [WEATHER], **extra}).json()
        spent.append(body["usage"]["output_tokens"])
        calls = [item for item in body["output"] if item["type"] == "function_call"]
        assert [json.loads(c["arguments"])["city"] for c in calls] == cities, body["output"]
        assert body["status"] == "completed" and body["max_tool_calls"] == limit
        conforms(body)
        _, events = stream_events(live.url, {"input": "weather?", "tools": [WEATHER], **extra})
        events_conform(events)
        added = [e for e in events if e["type"] == "response.output_item.added"
                 and e["item"]["type"] == "function_call"]
        assert len(added) == len(cities)
    # the generation stopped there: the calls past the limit were never written
    assert spent[0] < spent[1] < spent[2], spent


def long_conversation(turns: int) -> list[dict[str, Any]]:
    words = " ".join(f"w{i}" for i in range(40))
    items: list[dict[str, Any]] = []
    for i in range(turns):
        items += [{"role": "user", "content": f"question {i}: {words}"},
                  {"role": "assistant", "content": f"answer {i}: {words}"}]
    return [*items, {"role": "user", "content": "the last question"}]


def test_truncation_auto_drops_the_oldest_turns_and_disabled_refuses(serve):
    live = serve("Fine.", context_length=512)
    items = long_conversation(8)
    refused = post(live.url, {"input": items, "instructions": "Be brief."})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "context_length_exceeded"
    assert post(live.url, {"input": items, "truncation": "disabled"}).status_code == 400
    r = post(live.url, {"input": items, "instructions": "Be brief.", "truncation": "auto"})
    assert r.status_code == 200, r.text
    dropped = int(r.headers["x-afm-truncated-turns"])
    assert 0 < dropped < len(items) and dropped % 2 == 0  # cut before a user turn
    body = r.json()
    assert body["truncation"] == "auto" and body["output"][0]["content"][0]["text"] == "Fine."
    assert body["usage"]["input_tokens"] < 512
    conforms(body)
    short = post(live.url, {"input": "hi", "truncation": "auto"})
    assert short.status_code == 200 and "x-afm-truncated-turns" not in short.headers
    # one turn that alone cannot fit: nothing to drop, the same 400
    huge = post(live.url, {"input": "w " * 2000, "truncation": "auto"})
    assert huge.status_code == 400 and huge.json()["error"]["code"] == "context_length_exceeded"


def test_a_codex_cli_turn_is_served(serve):
    # The fields Codex CLI 0.171.0 sends on every turn (captured from it), its built-in
    # web_search and namespace tools left out (configured off: docs/protocol.md).
    live = serve("Hello")
    body = {"model": "scripted", "instructions": "You are Codex.", "stream": True,
            "input": [{"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]}
                      for role, text in (("developer", "ctx"), ("user", "hi"))],
            "tools": [WEATHER], "tool_choice": "auto", "parallel_tool_calls": True,
            "reasoning": {"summary": "auto"}, "store": False, "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": "01a24e3d", "client_metadata": {"thread_id": "01a24e3d", "turn_id": "7"}}
    response, events = stream_events(live.url, body)
    assert response.status_code == 200
    events_conform(events)
    final = events[-1]["response"]
    assert final["status"] == "completed" and final["reasoning"]["summary"] is None
    assert "client_metadata" not in final and final["prompt_cache_key"] == "01a24e3d"
    bad = post(live.url, {"input": "hi", "client_metadata": "x"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "client_metadata"


# -- compact -----------------------------------------------------------------------------------


def test_compact_summarizes_with_the_served_model_and_is_kept(stored):
    live = stored("SUMMARY-7")
    first = post(live.url, {"input": "My name is Ada."}).json()
    assert wait_until(lambda: httpx.get(f"{live.url}/v1/responses/{first['id']}").status_code == 200)
    r = httpx.post(f"{live.url}/v1/responses/compact",
                   json={"model": "scripted", "previous_response_id": first["id"],
                         "input": [{"role": "user", "content": "And I like tea."}]}, timeout=60)
    assert r.status_code == 200, r.text
    compacted = r.json()
    conforms(compacted, "CompactResource")
    assert compacted["object"] == "response.compaction" and compacted["usage"]["input_tokens"] > 0
    out = compacted["output"]
    assert [item["content"][0]["text"] for item in out] == ["My name is Ada.", "And I like tea.", "SUMMARY-7"]
    assert [item["role"] for item in out] == ["user", "user", "assistant"]
    # kept like a response: retrievable, and a conversation continues from it alone
    kept = httpx.get(f"{live.url}/v1/responses/{compacted['id']}")
    assert kept.status_code == 200 and kept.json()["output"] == out
    conforms(kept.json())
    items = httpx.get(f"{live.url}/v1/responses/{compacted['id']}/input_items").json()["data"]
    assert items == []
    follow = post(live.url, {"input": "go on", "previous_response_id": compacted["id"]})
    assert follow.status_code == 200
    # the output is input this server takes back
    again = post(live.url, {"input": [*out, {"role": "user", "content": "next"}]})
    assert again.status_code == 200, again.text


@pytest.mark.parametrize(("body", "param"), [
    ({"input": "hi"}, "model"),
    ({"model": "scripted"}, "input"),
    ({"model": "scripted", "input": []}, "input"),
    ({"model": "scripted", "input": "hi", "stream": True}, "stream"),
])
def test_compact_refusals_name_the_field(stored, body, param):
    live = stored()
    r = httpx.post(f"{live.url}/v1/responses/compact", json=body, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_compact_bounds_what_it_would_keep(stored):
    # The bounds of a create apply: an overlong id is refused before its lookup (a 404 would
    # quote it), and so is model output passed back past its total.
    live = stored()
    r = httpx.post(f"{live.url}/v1/responses/compact",
                   json={"model": "scripted", "previous_response_id": "r" * 100_000}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "previous_response_id", r.text
    assert "r" * 300 not in r.text
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "x" * 1_100_000}
    r = httpx.post(f"{live.url}/v1/responses/compact",
                   json={"model": "scripted", "input": [{"role": "user", "content": "hi"}, call]}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["code"] == "string_above_max_length", r.text


def test_compact_is_not_a_response_id(serve):
    live = serve()
    r = httpx.post(f"{live.url}/v1/responses/compact", json={"model": "scripted", "input": "hi"}, timeout=60)
    assert r.status_code == 200 and r.json()["object"] == "response.compaction"
    r = httpx.post(f"{live.url}/v1/responses/compact",
                   json={"model": "scripted", "previous_response_id": "resp_x"}, timeout=60)
    assert r.status_code == 404 and r.json()["error"]["param"] == "previous_response_id"


# -- WebSocket mode --------------------------------------------------------------------------


def test_websocket_mode_is_a_400_that_points_at_sse(serve):
    live = serve()
    with pytest.raises(InvalidStatus) as caught:
        websockets.sync.client.connect(live.url.replace("http://", "ws://") + "/v1/responses",
                                       open_timeout=10)
    response = caught.value.response
    assert response.status_code == 400
    error = json.loads(response.body)["error"]
    assert error["code"] == "unsupported_transport" and "server-sent events" in error["message"]


# -- cuts inside a character -----------------------------------------------------------------

SCRIPT = "Tea 日本語 🙂!"


def cut_points(tokenizer: Any) -> list[int]:
    """Budgets that end inside a character (the decoded prefix ends with U+FFFD)."""
    ids = tokenizer.encode(SCRIPT)
    return [k for k in range(1, len(ids)) if tokenizer.decode(ids[:k]).endswith("\ufffd")]


def whole_prefix(tokenizer: Any, k: int) -> str:
    ids = tokenizer.encode(SCRIPT)
    return max((tokenizer.decode(ids[:j]) for j in range(k + 1)
                if not tokenizer.decode(ids[:j]).endswith("\ufffd")), key=len)


def cut_texts(url: str, k: int) -> dict[str, str]:
    """The text each door returns when ``k`` tokens cut the script, streamed and not."""
    out: dict[str, str] = {}
    user = [{"role": "user", "content": "hi"}]
    body = post(url, {"input": "hi", "max_output_tokens": k}).json()
    out["responses"] = body["output"][0]["content"][0]["text"]
    _, events = stream_events(url, {"input": "hi", "max_output_tokens": k})
    out["responses stream"] = "".join(e["delta"] for e in events
                                      if e["type"] == "response.output_text.delta")
    chat = httpx.post(f"{url}/v1/chat/completions", json={"messages": user, "max_tokens": k},
                      timeout=60).json()
    out["chat"] = chat["choices"][0]["message"]["content"]
    with httpx.stream("POST", f"{url}/v1/chat/completions", timeout=60,
                      json={"messages": user, "max_tokens": k, "stream": True}) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
    out["chat stream"] = "".join(c["choices"][0]["delta"].get("content") or ""
                                 for c in chunks if c["choices"])
    done = httpx.post(f"{url}/v1/completions", json={"prompt": "hi", "max_tokens": k}, timeout=60).json()
    out["completions"] = done["choices"][0]["text"]
    ollama = httpx.post(f"{url}/api/chat", json={"model": "scripted", "messages": user, "stream": False,
                                                  "options": {"num_predict": k}}, timeout=60).json()
    out["ollama"] = ollama["message"]["content"]
    with httpx.stream("POST", f"{url}/api/generate", timeout=60,
                      json={"model": "scripted", "prompt": "hi", "options": {"num_predict": k}}) as r:
        out["ollama stream"] = "".join(json.loads(line).get("response", "")
                                       for line in r.iter_lines() if line)
    return out


def test_a_cut_inside_a_character_ends_at_the_last_whole_one_on_every_door(serve, tokenizer):
    live = serve(SCRIPT)
    points = cut_points(tokenizer)
    assert points, "the script must have characters spanning several tokens"
    for k in points:
        expected = whole_prefix(tokenizer, k)
        texts = cut_texts(live.url, k)
        assert texts == dict.fromkeys(texts, expected), (k, texts)
