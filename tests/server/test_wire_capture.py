"""Chat Completions, byte for byte: a fixed set of scripted requests against golden transcripts.

Each case sends its requests to a live server on the scripted model (real HTTP) and renders
what came back, status, headers and body bytes (:mod:`.wire_capture`); the transcript must equal
``wire/chat/<case>.txt``.  The golden files were recorded from the server before the protocol-
neutral core (issue 27) and pin its wire output: streamed and not, json_schema strict and not,
json_object, tools (auto, required, named; parallel calls), reasoning, logprobs, stop strings,
the usage chunk, profiles, errors before headers (400s of each kind, 404, 409, 503) and after
(an error chunk), cancel by request ID and client disconnects.

``AFM_STRUCT_RECORD_WIRE=1`` rewrites the golden files (only when the wire is meant to change;
say so in the commit).
"""

from __future__ import annotations

import difflib
import os
import re
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

import server.middleware
from afm_struct.decoding import emit as emit_module
from afm_struct.testing import Script
from server.live import LiveServer, start_server
from server.settings import ServerSettings

from .conftest import wait_until
from .wire_capture import EventReader, FixedIds, GatedModel, Transcript, compact, gated_loaded_model

GOLDEN = Path(__file__).parent / "wire" / "chat"
RECORD = os.environ.get("AFM_STRUCT_RECORD_WIRE") == "1"
CHAT = "/v1/chat/completions"

PERSON = '{"name": "Ada", "age": 36}'
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "CITY", "unit": "celsius"}}\n</tool_call>'
CALL_PARIS, CALL_OSLO = CALL.replace("CITY", "Paris"), CALL.replace("CITY", "Oslo")
# What the scripted model says, by the ``case:<key>`` its prompt's last user turn holds.
ANSWERS = {
    "hello": "Hello there, world! How are you?",
    "person": PERSON,
    "fenced": f"Here you go:\n```json\n{PERSON}\n```",
    "odd": '{"a": 1}',
    "checking": f"Checking.\n{CALL_PARIS}",
    "parallel": f"{CALL_PARIS}\n{CALL_OSLO}",
    "time": '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>',
    "search": '<tool_call>\n{"name": "search", "arguments": {"query": "mlx"}}\n</tool_call>',
    "after-tool": "It is 21 degrees and clear in Paris.",
    "think": "<think>Two and two make four.</think>The answer is 4.",
    "think-json": f"<think>A person.</think>{PERSON}",
    "think-call": f"<think>The user wants the weather.</think>\nChecking.\n{CALL_PARIS}",
    "unicode": "Größe: 36 °C — ok ✓",
    "long": " ".join(f"w{i}" for i in range(80)),
}

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
ODD = {"type": "object", "properties": {"a": {"oneOf": [{"type": "integer"},
                                                        {"type": "number", "multipleOf": 0.5}]}},
       "required": ["a"]}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city", "strict": True,
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "The current time",
                                         "strict": True}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}
TOOLS = [WEATHER, TIME, SEARCH]


def user(key: str, text: str = "Please answer.") -> list[dict[str, Any]]:
    """One user turn that selects the scripted answer ``key``."""
    return [{"role": "user", "content": f"{text} case:{key}"}]


def json_schema(strict: bool | None, schema: Any = SCHEMA, name: str = "person") -> dict[str, Any]:
    """A json_schema response_format."""
    spec: dict[str, Any] = {"name": name, "schema": schema}
    if strict is not None:
        spec["strict"] = strict
    return {"type": "json_schema", "json_schema": spec}


class Servers:
    """The live servers the cases use, started on first use (scripted, gated models)."""

    SETTINGS: ClassVar[dict[str, dict[str, Any]]] = {
        "default": {},
        "think": {"reasoning": "think"},
        "narrow": {"max_active": 1, "max_queue": 1},
        "failing": {},
        "faults": {},
    }

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.live: dict[str, LiveServer] = {}
        self.ids = FixedIds()

    def get(self, key: str) -> LiveServer:
        if key not in self.live:
            tok = self.tokenizer

            def answer(prompt_ids: list[int]) -> str:
                keys = re.findall(r"case:([\w-]+)", tok.decode(prompt_ids))
                return ANSWERS[keys[-1]] if keys else ANSWERS["hello"]

            script = Script(answer, fail_at=3 if key == "failing" else None)
            live = start_server(gated_loaded_model(tok, script), ServerSettings(**self.SETTINGS[key]))
            live.state.ids = self.ids  # type: ignore[assignment]
            self.live[key] = live
        return self.live[key]

    def stop(self) -> None:
        for live in self.live.values():
            live.stop()


@pytest.fixture(scope="module")
def servers(tokenizer: Any) -> Iterator[Servers]:
    made = Servers(tokenizer)
    yield made
    made.stop()


Case = Callable[[Transcript, LiveServer], None]
CASES: dict[str, tuple[str, Case]] = {}


def case(name: str, server: str = "default") -> Callable[[Case], Case]:
    """Register a case run against ``server``."""
    def register(fn: Case) -> Case:
        CASES[name] = (server, fn)
        return fn
    return register


def chat(t: Transcript, body: dict[str, Any], *, rid: str, headers: dict[str, str] | None = None,
         profile: bool = False) -> httpx.Response:
    """POST a chat completion with X-Request-ID ``rid``."""
    return t.post(CHAT, body, headers={"x-request-id": rid, **(headers or {})}, profile=profile)


def both(name: str, body: dict[str, Any], server: str = "default", **kwargs: Any) -> None:
    """A case sending ``body`` streamed (with the usage chunk) and not."""
    @case(name, server)
    def run(t: Transcript, live: LiveServer) -> None:
        streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}
        chat(t, streamed, rid=f"{name}-s", **kwargs)
        chat(t, body, rid=f"{name}-j", **kwargs)


# -- text --------------------------------------------------------------------------------------
both("text", {"messages": user("hello"), "seed": 7})
both("text_unicode", {"messages": user("unicode"), "model": "scripted"})
both("text_length", {"messages": user("hello"), "max_tokens": 3})
both("text_stop", {"messages": user("hello"), "stop": ["world", "xyz"]})
both("text_parts_developer", {"messages": [
    {"role": "developer", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Say "}, {"type": "text", "text": "case:hello"}]}],
    "temperature": 0.5, "top_p": 0.9, "chat_template_kwargs": {"enable_thinking": False}})


@case("text_stream_without_usage")
def _(t: Transcript, live: LiveServer) -> None:
    chat(t, {"messages": user("hello"), "stream": True}, rid="plain-s")
    chat(t, {"messages": user("hello"), "stream": True, "stream_options": {"include_usage": False}},
         rid="plain-s2")


# -- response_format ---------------------------------------------------------------------------
both("json_schema_strict", {"messages": user("person"), "response_format": json_schema(True)})
both("json_schema_non_strict", {"messages": user("person"), "response_format": json_schema(None)})
both("json_schema_strict_downgraded", {"messages": user("odd"),
                                       "response_format": json_schema(True, ODD, "odd")})
both("json_object", {"messages": user("person"), "response_format": {"type": "json_object"}})
both("response_format_text", {"messages": user("hello"), "response_format": {"type": "text"}})
both("json_schema_closed_on_length", {"messages": user("person"), "response_format": json_schema(True),
                                      "max_tokens": 12})
both("json_schema_budget_below_shortest", {"messages": user("person"), "response_format": json_schema(True),
                                           "max_tokens": 6})
both("json_schema_cut_without_closing", {"messages": user("person"), "response_format": json_schema(True),
                                         "max_tokens": 6, "afm_close_on_length": False})

# -- tools -------------------------------------------------------------------------------------
both("tools_auto_text_then_call", {"messages": user("checking"), "tools": TOOLS})
both("tools_auto_parallel", {"messages": user("parallel"), "tools": TOOLS, "tool_choice": "auto"})
both("tools_required_parallel", {"messages": user("parallel"), "tools": TOOLS, "tool_choice": "required"})
both("tools_required_one_call", {"messages": user("parallel"), "tools": TOOLS, "tool_choice": "required",
                                 "parallel_tool_calls": False})
both("tools_named", {"messages": user("time"), "tools": TOOLS,
                     "tool_choice": {"type": "function", "function": {"name": "get_time"}}})
both("tools_non_strict", {"messages": user("search"), "tools": [SEARCH], "tool_choice": "required"})
both("tools_none", {"messages": user("hello"), "tools": TOOLS, "tool_choice": "none"})
both("tools_with_json_format", {"messages": user("person"), "tools": TOOLS,
                                "response_format": json_schema(True)})
both("tools_history", {"messages": [
    {"role": "system", "content": "You can call tools."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_abc", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
    {"role": "tool", "tool_call_id": "call_abc", "content": '{"temp_c": 21, "sky": "clear"}'},
    {"role": "user", "content": "So? case:after-tool"}], "tools": TOOLS})

# -- logprobs ----------------------------------------------------------------------------------
both("logprobs_text", {"messages": user("hello"), "logprobs": True, "max_tokens": 5})
both("logprobs_top", {"messages": user("unicode"), "logprobs": True, "top_logprobs": 2, "max_tokens": 6})
both("logprobs_json_schema", {"messages": user("person"), "response_format": json_schema(True),
                              "logprobs": True, "top_logprobs": 1})
both("logprobs_downgraded", {"messages": user("odd"), "response_format": json_schema(True, ODD, "odd"),
                             "logprobs": True})
both("logprobs_tool_calls", {"messages": user("checking"), "tools": TOOLS, "logprobs": True,
                             "top_logprobs": 1})

# -- reasoning (a server that splits <think> blocks) ---------------------------------------------
both("reasoning", {"messages": user("think")}, "think")
both("reasoning_logprobs", {"messages": user("think"), "logprobs": True}, "think")
both("reasoning_json_schema", {"messages": user("think-json"), "response_format": json_schema(True)}, "think")
both("reasoning_tool_call", {"messages": user("think-call"), "tools": TOOLS}, "think")
both("reasoning_stop", {"messages": user("think"), "stop": ["four"]}, "think")

# -- profile -----------------------------------------------------------------------------------
both("profile", {"messages": user("hello")}, headers={"x-afm-profile": "true"}, profile=True)


@case("profile_extended")
def _(t: Transcript, live: LiveServer) -> None:
    chat(t, {"messages": user("hello")}, rid="pe-j", headers={"x-afm-profile": "extended"}, profile=True)
    chat(t, {"messages": user("hello"), "stream": True}, rid="pe-s", headers={"x-afm-profile": "extended"},
         profile=True)


# -- errors before headers ---------------------------------------------------------------------
BAD = {
    "bad_temperature": {"messages": user("hello"), "temperature": 3},
    "bad_no_messages": {"messages": []},
    "bad_missing_messages": {"model": "scripted"},
    "bad_role": {"messages": [{"role": "robot", "content": "x"}]},
    "bad_image_part": {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "x"}, {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]},
    "bad_tool_message": {"messages": [{"role": "tool", "content": "x"}]},
    "bad_no_content": {"messages": [{"role": "user"}]},
    "bad_n": {"messages": user("hello"), "n": 2},
    "bad_top_logprobs_alone": {"messages": user("hello"), "top_logprobs": 2},
    "bad_top_logprobs_range": {"messages": user("hello"), "logprobs": True, "top_logprobs": 21},
    "bad_schema": {"messages": user("person"), "response_format": json_schema(True, {"type": "objekt"})},
    "bad_schema_name": {"messages": user("person"), "response_format": {
        "type": "json_schema", "json_schema": {"name": "", "schema": SCHEMA}}},
    "bad_format_type": {"messages": user("person"), "response_format": {"type": "yaml"}},
    "bad_unsatisfiable": {"messages": user("person"), "response_format": json_schema(True, {
        "type": "object", "properties": {"a": {"type": "integer", "minimum": 5, "maximum": 1}},
        "required": ["a"]})},
    "bad_forced_run": {"messages": user("person"), "response_format": json_schema(True, {
        "type": "object", "properties": {"k": {"const": "x" * 12000}}, "required": ["k"]})},
    "bad_tool_parameters_type": {"messages": user("hello"), "tools": [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]},
    "bad_tool_schema": {"messages": user("hello"), "tools": [WEATHER, {"type": "function", "function": {
        "name": "g", "parameters": {"type": "object", "properties": {"x": {"type": 5}}}}}]},
    "bad_tool_duplicate": {"messages": user("hello"), "tools": [WEATHER, WEATHER]},
    "bad_tool_name": {"messages": user("hello"),
                      "tools": [{"type": "function", "function": {"name": "a b"}}]},
    "bad_tool_shape": {"messages": user("hello"), "tools": [{"type": "function"}]},
    "bad_tool_choice_unknown": {"messages": user("hello"), "tools": TOOLS,
                                "tool_choice": {"type": "function", "function": {"name": "nope"}}},
    "bad_tool_choice_without_tools": {"messages": user("hello"), "tool_choice": "required"},
    "bad_tool_choice_value": {"messages": user("hello"), "tools": TOOLS, "tool_choice": "sometimes"},
    "bad_stops": {"messages": user("hello"), "stop": [f"s{i}" for i in range(17)]},
    "bad_context": {"messages": user("hello"), "max_tokens": 9000},
    "bad_context_completion": {"messages": user("hello"), "max_completion_tokens": 8190},
    "bad_seed": {"messages": user("hello"), "seed": 2 ** 70},
    "bad_model": {"messages": user("hello"), "model": "gpt-4o"},
    "bad_surrogate": None,  # sent raw below
    "bad_json": None,
    "bad_request_id": None,
}


@case("errors_before_headers")
def _(t: Transcript, live: LiveServer) -> None:
    for name, body in BAD.items():
        if body is None:
            continue
        chat(t, body, rid=name)
        chat(t, {**body, "stream": True}, rid=f"{name}-s")
    t.post(CHAT, None, raw=b'{"messages":[{"role":"user","content":"a\\ud800"}]}',
           headers={"x-request-id": "bad_surrogate"})
    t.post(CHAT, None, raw=b'{"messages": [', headers={"x-request-id": "bad_json"})
    with pytest.MonkeyPatch.context() as patch:  # the ID the server makes for a refused one
        patch.setattr(server.middleware, "new_request_id", lambda: "req_made_by_the_server")
        t.post(CHAT, {"messages": user("hello")}, headers={"x-request-id": "bad id"})
    t.post(CHAT + "/no-such-id/cancel", None, headers={"x-request-id": "cancel-unknown"})


# -- errors after headers ----------------------------------------------------------------------
both("error_chunk_model_failure", {"messages": user("hello")}, "failing")
both("error_chunk_model_failure_json", {"messages": user("person"), "response_format": json_schema(True)},
     "failing")


@case("error_chunk_emit_fault", "faults")
def _(t: Transcript, live: LiveServer) -> None:
    calls = {"n": 0}
    real = emit_module.emit_run

    def failing_emit(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 4:
            raise RuntimeError("injected emit fault <state>internals</state>")
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(emit_module, "emit_run", failing_emit)  # (emit_runs calls it there)
        body = {"messages": user("person"), "response_format": json_schema(True), "stream": True,
                "stream_options": {"include_usage": True}}
        chat(t, body, rid="fault-s")
        calls["n"] = 0
        chat(t, {**body, "stream": False}, rid="fault-j")


# -- cancel, disconnect, a full queue, a duplicate ID (a narrow server, a gated model) ---------
def _hold(live: LiveServer, at: int) -> GatedModel:
    model = live.loaded.model
    assert isinstance(model, GatedModel)
    model.hold(at)
    return model


def _idle(live: LiveServer) -> None:
    assert wait_until(lambda: len(live.state.registry) == 0 and live.state.scheduler.load[0] == 0)


def _open(t: Transcript, body: dict[str, Any], rid: str) -> Any:
    """Start a streamed request (recorded); the caller reads and records the response."""
    data = compact({**body, "stream": True})
    headers = {"content-type": "application/json", "x-request-id": rid}
    t.request("POST", CHAT, data, headers)
    return httpx.stream("POST", t.url + CHAT, content=data, headers=headers, timeout=60)


def _in_background(t: Transcript, body: dict[str, Any], rid: str) -> tuple[threading.Thread, dict[str, Any]]:
    """Send a non-streamed request from a thread (recorded); its response lands in the dict."""
    data = compact(body)
    headers = {"content-type": "application/json", "x-request-id": rid}
    t.request("POST", CHAT, data, headers)
    got: dict[str, Any] = {}
    sender = threading.Thread(target=lambda: got.setdefault(
        "response", httpx.post(t.url + CHAT, content=data, headers=headers, timeout=60)))
    sender.start()
    return sender, got


@case("cancel_by_request_id", "narrow")
def _(t: Transcript, live: LiveServer) -> None:
    model = _hold(live, 6)
    body = {"messages": user("long"), "stream_options": {"include_usage": True}}
    with _open(t, body, "cancel-me") as response:
        assert model.holding.wait(30)
        t.note("held after 6 tokens; cancel")
        t.post(CHAT + "/cancel-me/cancel", None, headers={"x-request-id": "cancel-call"})
        model.open()
        t.response(response, response.read())
    _idle(live)
    t.post(CHAT + "/cancel-me/cancel", None, headers={"x-request-id": "cancel-late"})


@case("cancel_non_streamed", "narrow")
def _(t: Transcript, live: LiveServer) -> None:
    model = _hold(live, 4)
    sender, got = _in_background(t, {"messages": user("long")}, "cancel-json")
    assert model.holding.wait(30)
    t.note("held after 4 tokens; cancel")
    t.post(CHAT + "/cancel-json/cancel", None, headers={"x-request-id": "cancel-json-call"})
    model.open()
    sender.join(60)
    t.response(got["response"], got["response"].content)


@case("queue_full_and_duplicate_id", "narrow")
def _(t: Transcript, live: LiveServer) -> None:
    model = _hold(live, 2)
    with _open(t, {"messages": user("hello")}, "first") as first:
        assert model.holding.wait(30)
        first_events = EventReader(first)
        head = first_events.events(1)
        with _open(t, {"messages": user("unicode")}, "second") as second:
            assert wait_until(lambda: live.state.scheduler.load[0] == 2)
            t.note("one request running (held), one queued")
            t.post(CHAT, {"messages": user("hello")}, headers={"x-request-id": "third"})
            t.post(CHAT, {"messages": user("hello"), "stream": True}, headers={"x-request-id": "fourth"})
            t.post(CHAT, {"messages": user("hello")}, headers={"x-request-id": "first"})
            model.open()
            t.response(first, head + first_events.rest())
            t.response(second, second.read())


@case("client_disconnect", "narrow")
def _(t: Transcript, live: LiveServer) -> None:
    model = _hold(live, 5)
    with _open(t, {"messages": user("long")}, "gone") as response:
        assert model.holding.wait(30)
        calls_at_hold = model.calls
        t.response(response, EventReader(response).events(3))
    t.note("the client disconnected after 3 events")
    _stopped(live, model, calls_at_hold)
    t.post(CHAT + "/gone/cancel", None, headers={"x-request-id": "gone-cancel"})

    model = _hold(live, 5)
    data = compact({"messages": user("long")})
    t.request("POST", CHAT, data, {"content-type": "application/json", "x-request-id": "gone-json"})
    host, port = t.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"POST " + CHAT.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"X-Request-ID: gone-json\r\nContent-Length: " + str(len(data)).encode() + b"\r\n\r\n"
                     + data)
        assert model.holding.wait(30)
        calls_at_hold = model.calls
    t.note("the client disconnected before the response")
    _stopped(live, model, calls_at_hold)
    t.post(CHAT + "/gone-json/cancel", None, headers={"x-request-id": "gone-json-cancel"})


def _stopped(live: LiveServer, model: GatedModel, calls_at_hold: int) -> None:
    """The disconnect ended the request: released (and slowed down, as a real model: a stream
    notices at a write that fails), it stops far before its script's ~160 tokens."""
    model.script.delay_s = 0.02
    try:
        model.open()
        _idle(live)
    finally:
        model.script.delay_s = 0.0
    assert model.calls - calls_at_hold < 60


@pytest.mark.parametrize("name", list(CASES))
def test_chat_wire_bytes_match_the_capture(name: str, servers: Servers) -> None:
    server, run = CASES[name]
    live = servers.get(server)
    _idle(live)
    servers.ids.reset()
    transcript = Transcript(live.url)
    run(transcript, live)
    got = transcript.render()
    path = GOLDEN / f"{name}.txt"
    if RECORD:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(got)
    want = path.read_bytes()
    if got != want:
        diff = difflib.unified_diff(want.decode(errors="replace").splitlines(),
                                    got.decode(errors="replace").splitlines(), "golden", "now", lineterm="")
        pytest.fail(f"{name}: the wire differs from {path.name}:\n" + "\n".join(list(diff)[:80]),
                    pytrace=False)


def test_every_golden_file_has_a_case() -> None:
    assert sorted(p.stem for p in GOLDEN.glob("*.txt")) == sorted(CASES)
