"""Random traffic over HTTP on a scripted server: both protocols, arrivals, kinds, cancels,
disconnects, bursts.

Each seed draws server limits (active 1-6, queue 0-6, join wait on or off) and 14-28 requests:
random start times (some in bursts that overflow the queue), Chat Completions or the Responses
API, streamed or not, json_schema, json_object, tools (auto or required) or free text, stop
strings (chat only: the Responses API has none), max_tokens / max_output_tokens; some cancelled
at a random point (chat: ``POST /v1/chat/completions/{X-Request-ID}/cancel``; a streamed
response: ``POST /v1/responses/{id}/cancel`` with the id from its first event, or the chat route
by X-Request-ID; a response not streamed, whose id comes only with the answer: the chat route),
some streams closed by the client after a random number of chunks or events.  Invariants:

* no status but 200 and 503 (a 503 comes before any stream starts), and the 400 that refuses
  a constrained request whose budget is below the shortest valid output;
* a completed chat stream is well framed and has exactly one finish chunk, then at most a usage
  chunk, then [DONE]; nothing follows [DONE];
* a completed Responses stream is well framed (``event:`` + ``data:`` + blank line, sequence
  numbers from 0), its items open and close in order, and it ends exactly once, with the
  terminal event its status calls for (completed → ``response.completed``; cut or cancelled →
  ``response.incomplete``); the deltas add up to the final items;
* a cancel answered 200 (either route, either protocol) makes the response finish ``cancelled``
  (chat's finish reason, the response's status), and a cancelled chat stream emits nothing
  after its finish chunk;
* constrained outputs that end by ``stop``/``length`` (completed / incomplete) parse (and
  validate against the schema) when no stop string cut them; tool calls' arguments parse and
  validate;
* every request that completed normally gets the same answer when sent again alone (the
  scripted model is deterministic);
* afterwards the server is idle: no request pending in the scheduler, no sequence in the
  generator, nothing in the in-flight registry nor among the running responses, the scheduler
  thread alive.

``AFM_STRUCT_RANDOM_EXAMPLES=N`` runs N seeds instead of the CI-sized default.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from typing import Any

import httpx
import jsonschema
import pytest

from afm_struct.testing import Script

from .conftest import wait_until
from .responses_traffic import answer_of, cancel_response, check_stream, parse_events, responses_body

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "strict": True, "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
CLOCK = {"type": "function", "function": {
    "name": "get_time", "strict": True, "parameters": {"type": "object", "properties": {
        "zone": {"type": "string"}}, "required": ["zone"], "additionalProperties": False}}}
TOOL_SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, CLOCK)}
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
SEEDS = int(os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES", "0")) or 3


def _script(ids: list[int]) -> str:
    n = sum(ids) % 7
    if n < 2:
        return ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}'
                '\n</tool_call>')
    if n < 4:
        return f'{{"name": "Ann{n}", "age": {30 + n}}}'
    return " ".join(f"{WORDS[(n + i) % len(WORDS)]}" for i in range(25 + 5 * n))


def _body(rng: random.Random, i: int, protocol: str) -> tuple[str, dict[str, Any]]:
    kind = rng.choice(["free", "free", "json_schema", "json_object", "tools_auto", "tools_required"])
    words = " ".join(rng.choice(WORDS) for _ in range(rng.choice([1, 3, 3, 12, 60])))
    body: dict[str, Any] = {"messages": [{"role": "user", "content": f"{words} {i % 5}"}],
                            "max_tokens": rng.choice([4, 16, 40, 80]),
                            "temperature": rng.choice([0, 0, 0.8]), "seed": rng.randrange(100)}
    if protocol == "chat" and rng.random() < 0.25:
        body["stop"] = rng.choice([["}"], ["a"], [" zeta", "ta"]])
    if kind == "json_schema":
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "p", "strict": True, "schema": SCHEMA}}
    elif kind == "json_object":
        body["response_format"] = {"type": "json_object"}
    elif kind.startswith("tools"):
        body["tools"] = [WEATHER, CLOCK]
        body["tool_choice"] = "required" if kind == "tools_required" else "auto"
        body["parallel_tool_calls"] = False
    return kind, body


def _check_answer(kind: str, body: dict[str, Any], reason: str, content: str | None,
                  calls: list[dict[str, Any]] | None) -> None:
    """What a finished answer must satisfy, by kind."""
    assert reason in ("stop", "length", "tool_calls", "cancelled"), reason
    if reason == "cancelled":
        return
    if calls:
        assert kind.startswith("tools"), (kind, calls)
    # A budget below the shortest valid output was refused before generating (a 400), so every
    # call is whole and valid, and a cut JSON answer still parses (budget-aware closing).
    for call in calls or ():
        args = json.loads(call["function"]["arguments"])
        jsonschema.validate(args, TOOL_SCHEMAS[call["function"]["name"]])
    if kind in ("json_schema", "json_object") and "stop" not in body:
        value = json.loads(content or "")
        if kind == "json_schema":
            jsonschema.validate(value, SCHEMA)
        else:
            assert isinstance(value, dict)
    if kind == "tools_required" and reason != "length":
        assert calls, (reason, content)


def _check_status(o: Outcome, r: httpx.Response) -> None:
    """200, 503, or the 400 refusing a budget below the shortest valid output (a schema or a
    required call needs more than 4 tokens; a json_object answer fits in 1), naming the
    protocol's budget field."""
    if r.status_code == 400:
        error = r.json()["error"]
        param = "max_tokens" if o.protocol == "chat" else "max_output_tokens"
        assert error["code"] == "max_tokens_too_small" and error["param"] == param, r.text
        assert o.kind in ("json_schema", "tools_required") and o.body["max_tokens"] < 40, (o.kind, o.body)
        return
    assert r.status_code in (200, 503), r.text


class Outcome:
    """What the client saw of one request."""

    def __init__(self, i: int, protocol: str, kind: str, body: dict[str, Any], stream: bool,
                 fate: str) -> None:
        self.i, self.protocol, self.kind, self.body = i, protocol, kind, body
        self.stream, self.fate = stream, fate
        self.status: int | None = None
        self.reason: str | None = None
        self.content: str | None = None
        self.calls: list[dict[str, Any]] | None = None
        self.cancel_status: int | None = None
        self.disconnected = False


def _assemble_stream(payloads: list[str]) -> tuple[str, str | None, list[dict[str, Any]]]:
    """(content, finish reason, tool calls) of a complete stream, asserting its contract."""
    assert payloads and payloads[-1] == "[DONE]" and "[DONE]" not in payloads[:-1], payloads[-3:]
    chunks = [json.loads(p) for p in payloads[:-1]]
    finishes = [j for j, c in enumerate(chunks) if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finishes) == 1, [c["choices"] for c in chunks[-4:]]
    after = chunks[finishes[0] + 1:]
    assert all(c["choices"] == [] for c in after), after  # only a usage chunk may follow
    assert len({c["id"] for c in chunks}) == 1
    content, calls = "", {}
    for c in chunks[:finishes[0] + 1]:
        delta = c["choices"][0]["delta"]
        content += delta.get("content") or ""
        for tc in delta.get("tool_calls") or []:
            call = calls.setdefault(tc["index"], {"function": {"name": "", "arguments": ""}})
            fn = tc.get("function") or {}
            call["function"]["name"] += fn.get("name") or ""
            call["function"]["arguments"] += fn.get("arguments") or ""
    return content, chunks[finishes[0]]["choices"][0]["finish_reason"], [calls[k] for k in sorted(calls)]


async def _chat_cancel(client: httpx.AsyncClient, url: str, o: Outcome) -> None:
    """Cancel by X-Request-ID on the chat route (the in-flight registry serves both protocols)."""
    r = await client.post(f"{url}/v1/chat/completions/rnd-{o.i}/cancel")
    assert r.status_code in (200, 404), r.text
    o.cancel_status = r.status_code


async def _one(client: httpx.AsyncClient, url: str, o: Outcome, rng: random.Random) -> None:
    if o.protocol == "responses":
        await _one_response(client, url, o, rng)
        return
    headers = {"X-Request-ID": f"rnd-{o.i}"}

    async def cancel() -> None:
        await _chat_cancel(client, url, o)

    if not o.stream:
        canceller = None
        if o.fate == "cancel":
            async def later() -> None:
                await asyncio.sleep(rng.uniform(0, 0.15))
                await cancel()
            canceller = asyncio.create_task(later())
        r = await client.post(f"{url}/v1/chat/completions", json=o.body, headers=headers)
        if canceller is not None:
            await canceller
        o.status = r.status_code
        _check_status(o, r)
        if r.status_code == 200:
            choice = r.json()["choices"][0]
            o.reason, o.content = choice["finish_reason"], choice["message"].get("content")
            o.calls = choice["message"].get("tool_calls")
        return
    stop_after = rng.randint(0, 12)
    async with client.stream("POST", f"{url}/v1/chat/completions", json={**o.body, "stream": True},
                             headers=headers) as r:
        o.status = r.status_code
        if r.status_code != 200:
            await r.aread()
            _check_status(o, r)
            return
        payloads: list[str] = []
        expect_blank = False
        async for line in r.aiter_lines():
            if expect_blank:
                assert line == "", line
                expect_blank = False
                continue
            assert line.startswith("data: "), line
            payloads.append(line[6:])
            expect_blank = True
            if len(payloads) == stop_after and o.fate == "disconnect":
                o.disconnected = True
                return  # the client goes away mid-stream
            if len(payloads) == stop_after and o.fate == "cancel":
                await cancel()
    o.content, o.reason, o.calls = _assemble_stream(payloads)


async def _one_response(client: httpx.AsyncClient, url: str, o: Outcome, rng: random.Random) -> None:
    headers = {"X-Request-ID": f"rnd-{o.i}"}
    body = responses_body(o.body)
    if not o.stream:
        canceller = None
        if o.fate == "cancel":
            async def later() -> None:
                await asyncio.sleep(rng.uniform(0, 0.15))
                await _chat_cancel(client, url, o)
            canceller = asyncio.create_task(later())
        r = await client.post(f"{url}/v1/responses", json=body, headers=headers)
        if canceller is not None:
            await canceller
        o.status = r.status_code
        _check_status(o, r)
        if r.status_code == 200:
            o.reason, o.content, o.calls = answer_of(r.json())
        return
    stop_after = rng.randint(0, 12)
    by_id = rng.random() < 0.7
    async with client.stream("POST", f"{url}/v1/responses", json={**body, "stream": True},
                             headers=headers) as r:
        o.status = r.status_code
        if r.status_code != 200:
            await r.aread()
            _check_status(o, r)
            return
        lines: list[str] = []
        response_id = None
        async for line in r.aiter_lines():
            lines.append(line)
            if line:
                continue
            events = len(lines) // 3  # an event is three lines: event, data, blank
            if response_id is None:
                response_id = json.loads(lines[1][len("data: "):])["response"]["id"]
            if events == stop_after and o.fate == "disconnect":
                o.disconnected = True
                return
            if events == max(stop_after, 1) and o.fate == "cancel":  # every one is cancelled
                if by_id:
                    o.cancel_status = await cancel_response(client, url, response_id)
                else:
                    await _chat_cancel(client, url, o)
    o.reason, o.content, o.calls = answer_of(check_stream(parse_events(lines)))


async def _traffic(url: str, rng: random.Random, n: int) -> list[Outcome]:
    outcomes = []
    starts: list[float] = []
    t = 0.0
    for i in range(n):
        if rng.random() < 0.3:  # a burst: several at the same moment
            t += rng.uniform(0, 0.3)
        starts.append(t)
        protocol = rng.choice(["chat", "responses"])
        kind, body = _body(rng, i, protocol)
        stream = rng.random() < 0.6
        fate = rng.choice(["normal", "normal", "normal", "cancel"] + (["disconnect"] if stream else []))
        outcomes.append(Outcome(i, protocol, kind, body, stream, fate))

    limits = httpx.Limits(max_connections=100, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        async def go(o: Outcome, at: float, seed: int) -> None:
            await asyncio.sleep(at)
            await _one(client, url, o, random.Random(seed))

        await asyncio.gather(*(go(o, at, rng.randrange(1 << 30))
                               for o, at in zip(outcomes, starts, strict=True)))
    return outcomes


async def _alone(url: str, o: Outcome) -> tuple[str | None, str | None, list[Any] | None]:
    async with httpx.AsyncClient(timeout=60) as client:
        if o.protocol == "responses":
            r = await client.post(f"{url}/v1/responses", json=responses_body(o.body))
            assert r.status_code == 200, r.text
            return answer_of(r.json())
        r = await client.post(f"{url}/v1/chat/completions", json=o.body)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    return choice["finish_reason"], choice["message"].get("content"), choice["message"].get("tool_calls")


def _calls_key(calls: list[dict[str, Any]] | None) -> list[tuple[str, str]]:
    return [(c["function"]["name"], c["function"]["arguments"]) for c in calls or []]


@pytest.mark.parametrize("seed", range(SEEDS))
def test_random_http_traffic(serve, seed):
    rng = random.Random(seed)
    live = serve(Script(_script, delay_s=0.002), max_active=rng.randint(1, 6),
                 max_queue=rng.randint(0, 6), join_wait_ms=rng.choice([0, 40]))
    outcomes = asyncio.run(_traffic(live.url, rng, rng.randint(14, 28)))

    scheduler = live.state.scheduler
    cap = scheduler.limits.max_active + scheduler.limits.max_queue
    running = getattr(live.app.state, "responses_running", {})  # made by the first response, kept
    idle = wait_until(lambda: scheduler.load == (0, cap) and not scheduler.generator.has_work
                      and len(live.state.registry) == 0 and not running)
    assert idle, (scheduler.load, scheduler.generator.active, len(live.state.registry), running)
    assert scheduler._thread is not None and scheduler._thread.is_alive()

    assert any(o.status == 200 for o in outcomes)
    for o in outcomes:
        if o.status != 200 or o.disconnected:
            continue
        where = (seed, o.i, o.protocol, o.kind, o.stream, o.fate, o.reason, o.content, o.calls)
        if o.cancel_status == 200:
            assert o.reason == "cancelled", where
        _check_answer(o.kind, o.body, o.reason, o.content, o.calls)
        if o.fate == "normal":
            assert o.reason != "cancelled", where
            reason, content, calls = asyncio.run(_alone(live.url, o))
            assert (reason, content or "", _calls_key(calls)) == (o.reason, o.content or "",
                                                                 _calls_key(o.calls)), where
