"""Live servers over real HTTP: uvicorn in a thread on an ephemeral port.

``serve(script, **settings)`` starts a server on a scripted model (fast, deterministic);
``real_server`` is one session-wide server on the embedded SmolLM2 (tests marked ``model``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from afm_struct.models import LoadedModel
from afm_struct.testing import Script, scripted_loaded_model
from server.app import create_app
from server.completions import ServerState
from server.settings import ServerSettings

USER = [{"role": "user", "content": "hi"}]


@dataclass
class LiveServer:
    """A running server and handles on its insides (for white-box assertions)."""

    url: str
    app: FastAPI
    loaded: LoadedModel
    server: uvicorn.Server
    thread: threading.Thread

    @property
    def state(self) -> ServerState:
        """The app's shared state (scheduler, registry)."""
        return self.app.state.afm  # type: ignore[no-any-return]

    def stop(self) -> None:
        """Shut uvicorn down and join its thread."""
        self.server.should_exit = True
        self.thread.join(timeout=10)


def start_server(loaded: LoadedModel, settings: ServerSettings | None = None, **kwargs: Any) -> LiveServer:
    """Start uvicorn on port 0 in a thread; return once it accepts connections."""
    app = create_app(loaded, settings, **kwargs)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                            timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    return LiveServer(f"http://127.0.0.1:{port}", app, loaded, server, thread)


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
