"""Run the app in a background uvicorn thread on an ephemeral port (tests, benchmarks, captures)."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any

import uvicorn
from fastapi import FastAPI

from afm_struct.models.loader import LoadedModel

from .app import create_app
from .connection import http_protocol
from .settings import ServerSettings
from .state import ServerState


class _PromptServer(uvicorn.Server):
    """uvicorn's server, whose main loop wakes as soon as it is told to exit instead of on its
    next 0.1 s tick (a test suite stops hundreds of these)."""

    _wake: asyncio.Event | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    async def main_loop(self) -> None:
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 1) % 864000
            try:
                await asyncio.wait_for(self._wake.wait(), 0.1)
            except TimeoutError:
                pass
            should_exit = await self.on_tick(counter)

    def exit_now(self) -> None:
        """Ask the server to exit, and wake its main loop (from any thread)."""
        self.should_exit = True
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            try:
                loop.call_soon_threadsafe(wake.set)
            except RuntimeError:  # the loop already closed
                pass


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
        if isinstance(self.server, _PromptServer):
            self.server.exit_now()
        else:
            self.server.should_exit = True
        self.thread.join(timeout=10)


def start_server(loaded: LoadedModel, settings: ServerSettings | None = None, *,
                 timeout_s: float = 20.0, **kwargs: Any) -> LiveServer:
    """Serve ``loaded`` on 127.0.0.1 port 0 in a daemon thread; return once it accepts."""
    settings = settings or ServerSettings()
    app = create_app(loaded, settings, **kwargs)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                            timeout_graceful_shutdown=2, http=http_protocol(settings))
    server = _PromptServer(config)
    thread = threading.Thread(target=server.run, name="uvicorn-live", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    return LiveServer(f"http://127.0.0.1:{port}", app, loaded, server, thread)
