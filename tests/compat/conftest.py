"""Client-library compatibility: one live server on the embedded SmolLM2 for this package.

The server is the real app (``server.app.create_app``) behind uvicorn on an ephemeral port,
wrapped in a small ASGI recorder that keeps every ``POST /v1/chat/completions`` and
``POST /v1/responses`` exchange (path, request body, status, headers, response body), with a
SQLite response store in a temporary directory (``previous_response_id`` works).  Tests assert
on what each library actually sends (``wire.requests``); when a test fails, its exchanges are
attached to the report as a ``wire`` section, so a failure shows the exact request and response
(``AFM_COMPAT_WIRE=1 pytest -rA tests/compat`` shows it for passing tests too).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
import pytest
import uvicorn
from pydantic import BaseModel

from afm_struct.models import LoadedModel
from afm_struct.store import open_store
from server.app import create_app

# Small budgets: the tiny model decodes ~18 tok/s on 2 cores; greedy decoding for stable answers.
MAX_TOKENS = 48
CITY_PROMPT = "Paris is the capital of France. Extract the city and its country."
WEATHER_PROMPT = "What is the weather in Paris, in celsius? Call the tool."


class City(BaseModel):
    """A city and the country it is in."""

    name: str
    country: str


class Weather(BaseModel):
    """Get the current weather for a city."""

    city: str
    unit: Literal["c", "f"]


@dataclass
class Exchange:
    """One recorded generation request (chat completions or responses) and its response."""

    path: str
    request: dict[str, Any]
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytearray = field(default_factory=bytearray)

    def render(self) -> str:
        text = self.body.decode("utf-8", "replace")
        if len(text) > 4000:
            text = text[:2000] + "\n…\n" + text[-2000:]
        grammar = self.headers.get("x-grammar-constraints", "")
        return (f">>> {self.path} {json.dumps(self.request, indent=1)}\n<<< {self.status} "
                f"{'x-grammar-constraints: ' + grammar if grammar else ''}\n{text}")


# The generation routes the recorder keeps (the stored-response routes pass through).
RECORDED = ("/v1/chat/completions", "/v1/responses")


class Recorder:
    """ASGI wrapper recording generation exchanges (other routes pass through)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.exchanges: list[Exchange] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in RECORDED:
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:  # read the whole body first, then replay it to the app
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        raw = b"".join(chunks)
        try:
            request = json.loads(raw)
        except ValueError:
            request = {"_raw": raw.decode("utf-8", "replace")}
        exchange = Exchange(scope["path"], request)
        self.exchanges.append(exchange)
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": raw, "more_body": False}
            return await receive()

        async def record(message: Any) -> None:
            if message["type"] == "http.response.start":
                exchange.status = message["status"]
                exchange.headers = {k.decode().lower(): v.decode() for k, v in message.get("headers", [])}
            elif message["type"] == "http.response.body":
                exchange.body.extend(message.get("body", b""))
            await send(message)

        await self.app(scope, replay, record)


@dataclass
class CompatServer:
    """The live server: ``base_url`` ends in ``/v1``; ``model`` is the id GET /v1/models gives."""

    url: str
    base_url: str
    model: str
    recorder: Recorder


@pytest.fixture(scope="package")
def compat_server(embedded: LoadedModel, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CompatServer]:
    store = open_store(tmp_path_factory.mktemp("compat-store") / "responses.sqlite3")
    recorder = Recorder(create_app(embedded, response_store=store))
    config = uvicorn.Config(recorder, host="127.0.0.1", port=0, log_level="warning",
                            timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn-compat", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    model = httpx.get(f"{url}/v1/models", timeout=10).json()["data"][0]["id"]
    yield CompatServer(url, f"{url}/v1", model, recorder)
    server.should_exit = True
    thread.join(timeout=10)


class Wire:
    """The exchanges one test made (the recorder is cleared before each test)."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder

    @property
    def exchanges(self) -> list[Exchange]:
        return self._recorder.exchanges

    @property
    def requests(self) -> list[dict[str, Any]]:
        return [e.request for e in self._recorder.exchanges]

    @property
    def last(self) -> dict[str, Any]:
        assert self.exchanges, "no generation request reached the server"
        return self.exchanges[-1].request


@pytest.fixture
def wire(compat_server: CompatServer, request: pytest.FixtureRequest) -> Iterator[Wire]:
    compat_server.recorder.exchanges.clear()
    recorded = Wire(compat_server.recorder)
    request.node._compat_wire = recorded
    yield recorded


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    recorded: Wire | None = getattr(item, "_compat_wire", None)
    show = report.failed or os.environ.get("AFM_COMPAT_WIRE") == "1"
    if report.when == "call" and show and recorded is not None:
        text = "\n\n".join(e.render() for e in recorded.exchanges) or "(no request reached the server)"
        report.sections.append(("wire", text))


def response_tool(request: dict[str, Any], name: str) -> dict[str, Any]:
    """The declared function tool ``name`` in a recorded Responses request (the flat shape)."""
    for tool in request.get("tools", []):
        if tool.get("type") == "function" and tool.get("name") == name:
            return tool
    raise AssertionError(f"no function tool {name!r} in {request.get('tools')}")


def tool_schema(request: dict[str, Any], name: str) -> dict[str, Any]:
    """The ``function`` object of the declared tool ``name`` in a recorded chat request."""
    for tool in request.get("tools", []):
        if tool.get("function", {}).get("name") == name:
            return tool["function"]
    names = [t.get("function", {}).get("name") for t in request.get("tools", [])]
    raise AssertionError(f"no tool {name!r} in {names}")
