"""A stub of the server for the soak's own tests: answers like the real one, or breaks on purpose.

``healthy=True``: ordinary requests get valid answers, hostile ones (a pattern, a lone
surrogate) a clean 400, and /health reports a flat RSS.  ``healthy=False``: a pattern request
fails with an error chunk and, for the next ``poison_s`` seconds, every ordinary request fails
the same way (the denial of service of issue 26); a surrogate gets a 500; json_schema answers
are cut by max_tokens unparseable (every other one flagged downgraded); and RSS grows with
every request.  Whatever the soak reports is then known in advance.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

VALID = {"s0": {"name": "Ada", "age": 36, "city": "London"},
         "s1": {"product": "mug", "price": 12.5, "in_stock": True},
         "s2": {"title": "Bread", "tags": ["baking"]}}
ARGS = '{"city": "Paris", "unit": "celsius"}'


def _answer(body: dict[str, Any], healthy: bool, n: int) -> tuple[dict[str, Any], str, dict[str, str]]:
    """(message, finish reason, headers) for an ordinary request."""
    rf = body.get("response_format") or {}
    if body.get("tools"):
        call = {"index": 0, "id": f"call_{n}", "type": "function",
                "function": {"name": "get_weather", "arguments": ARGS}}
        return {"tool_calls": [call]}, "tool_calls", {}
    if rf.get("type") == "json_schema":
        if healthy:
            return {"content": json.dumps(VALID[rf["json_schema"]["name"]])}, "stop", {}
        flagged = {"X-Grammar-Constraints": "downgraded"} if n % 2 else {}
        return {"content": '{"name": "Ad'}, "length", flagged
    if rf.get("type") == "json_object":
        return {"content": '{"a": 1}'}, "stop", {}
    return {"content": "Hello there"}, "stop", {}


def _error(status: int, message: str, type_: str, code: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": type_, "param": None, "code": code}},
                        status_code=status)


def _sse(rid: str, message: dict[str, Any] | None, finish: str | None) -> Iterator[str]:
    def chunk(obj: dict[str, Any]) -> str:
        return f"data: {json.dumps({'id': rid, 'object': 'chat.completion.chunk', **obj})}\n\n"

    if message is None:  # an error after the 200: the error chunk, then [DONE]
        yield chunk({"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]})
        yield chunk({"choices": [], "error": {"message": "generation failed", "type": "server_error",
                                              "code": "generation_failed"}})
    else:
        delta = {"role": "assistant", **message}
        yield chunk({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        yield chunk({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        yield chunk({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}})
    yield "data: [DONE]\n\n"


def stub_app(healthy: bool, poison_s: float = 0.6, delay_s: float = 0.0) -> FastAPI:
    """The stub as an ASGI app (see the module docstring); every completion waits ``delay_s``."""
    app = FastAPI()
    state = {"posts": 0, "poisoned_until": 0.0}

    @app.get("/health")
    async def health() -> dict[str, Any]:
        grown = 0 if healthy else 4 * state["posts"]
        return {"status": "ok", "capacity": 4, "requests_in_flight": 0, "rss_bytes": (100 + grown) << 20}

    @app.post("/v1/chat/completions/{rid}/cancel")
    async def cancel(rid: str) -> JSONResponse:
        return JSONResponse({"id": rid, "cancelled": False}, status_code=404)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        raw = await request.body()
        await asyncio.sleep(delay_s)
        state["posts"] += 1
        n = state["posts"]
        body = json.loads(raw)
        rid = f"chatcmpl-{n}"
        hostile_pattern = b'"pattern"' in raw
        if b"\\ud8" in raw or b"\\udf" in raw:
            if healthy:
                return _error(400, "messages[0].content holds a lone surrogate", "invalid_request_error",
                              "invalid_value")
            return _error(500, "internal server error", "server_error", "internal_error")
        if hostile_pattern and healthy:
            return _error(400, "the pattern is too complex (at $.pattern)", "invalid_request_error",
                          "invalid_schema")
        failing = hostile_pattern or time.monotonic() < state["poisoned_until"]
        if hostile_pattern:
            state["poisoned_until"] = time.monotonic() + poison_s
        message, finish, headers = (None, None, {}) if failing else _answer(body, healthy, n)
        if body.get("stream"):
            return StreamingResponse(_sse(rid, message, finish), media_type="text/event-stream",
                                     headers=headers)
        if message is None:
            return _error(500, "generation failed", "server_error", "generation_failed")
        return JSONResponse({"id": rid, "object": "chat.completion", "model": "stub", "choices": [
            {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}, headers=headers)

    return app


@contextmanager
def running_stub(healthy: bool, delay_s: float = 0.0) -> Iterator[str]:
    """Serve the stub on an ephemeral loopback port; yield its URL."""
    app = stub_app(healthy, delay_s=delay_s)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                           timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the stub did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
