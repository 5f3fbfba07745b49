"""Live servers over real HTTP: uvicorn in a thread on an ephemeral port (server.live).

``serve(script, **settings)`` starts a server on a scripted model (fast, deterministic);
``real_server`` is one session-wide server on the embedded SmolLM2 (tests marked ``model``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from afm_struct.models import LoadedModel
from afm_struct.testing import Script, scripted_loaded_model
from server.live import LiveServer, start_server
from server.settings import ServerSettings

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture
def serve(tokenizer: Any) -> Iterator[Callable[..., LiveServer]]:
    """Factory: ``serve(script_or_text, context_length=..., **ServerSettings fields)``."""
    started: list[LiveServer] = []

    def make(script: Script | str = "Hello there, world!", *, context_length: int = 8192,
             compile_fn: Any = None, **settings: Any) -> LiveServer:
        loaded = scripted_loaded_model(tokenizer, script, context_length=context_length)
        live = start_server(loaded, ServerSettings(**settings), compile_fn=compile_fn)
        started.append(live)
        return live

    yield make
    for live in started:
        live.stop()


@pytest.fixture(scope="session")
def real_server(embedded: LoadedModel) -> Iterator[LiveServer]:
    """The embedded model behind a live server, once per session."""
    live = start_server(embedded)
    yield live
    live.stop()


def sse_payloads(lines: Iterator[str]) -> list[str]:
    """The data payloads of an SSE body, asserting the framing (data line + blank line)."""
    payloads: list[str] = []
    expect_blank = False
    for line in lines:
        if expect_blank:
            assert line == "", f"an event is not followed by a blank line: {line!r}"
            expect_blank = False
            continue
        assert line.startswith("data: "), f"unexpected SSE line {line!r}"
        payloads.append(line[len("data: "):])
        expect_blank = True
    return payloads


def stream_raw(url: str, body: dict[str, Any], headers: dict[str, str] | None = None,
               ) -> tuple[httpx.Response, list[str]]:
    """POST a streaming request; the response (headers) and its raw data payloads, in order."""
    with httpx.stream("POST", f"{url}/v1/chat/completions", json={"stream": True, **body},
                      headers=headers or {}, timeout=60) as response:
        if response.status_code != 200:
            response.read()
            return response, []
        return response, sse_payloads(response.iter_lines())


def decode(payloads: list[str]) -> list[Any]:
    """JSON-decode every payload except the final [DONE] (which must be last)."""
    assert payloads and payloads[-1] == "[DONE]", payloads[-3:]
    assert "[DONE]" not in payloads[:-1]
    return [json.loads(p) for p in payloads[:-1]]


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll ``predicate`` until true or timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()
