"""Graceful drain on SIGTERM, then a clean exit (status 0).

On the first SIGTERM the server keeps its socket open but stops taking work:
``/health`` answers 503 ``{"status": "draining"}`` (a balancer's health check takes the
replica out) and every new request but cancels, ``/health`` and ``/metrics`` gets 503
``draining`` with ``Retry-After`` (HAProxy retries those on another replica).  Requests in
flight run on for up to ``--drain-seconds``; whatever is still running then is cancelled by
request ID, so each stream ends with ``finish_reason: "cancelled"``, its usage and ``[DONE]``.
Then uvicorn shuts down and the process exits 0.  A second SIGTERM, or SIGINT, skips the wait.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import time
from dataclasses import dataclass
from types import FrameType
from typing import Any

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from afm_struct import __version__
from afm_struct.errors import UnavailableError

from .connection import http_protocol
from .logging_json import uvicorn_log_config
from .middleware import send_error
from .settings import ServerSettings

log = logging.getLogger("afm_struct.server")
# Paths that still answer while draining: probes, scrapes, and cancels of running requests.
_STILL_OPEN = ("/health", "/metrics")
# After the grace period: how long cancelled requests get to send their last chunks.
CANCEL_GRACE_S = 10.0
_POLL_S = 0.05


@dataclass
class DrainState:
    """Whether the server drains, since when and until when; and the requests still running."""

    draining: bool = False
    deadline: float = 0.0
    active: int = 0  # requests let through and not yet answered in full

    def begin(self, seconds: float) -> None:
        """Start draining now, with ``seconds`` of grace."""
        if not self.draining:
            self.draining = True
            self.deadline = time.monotonic() + seconds

    @property
    def remaining_s(self) -> float:
        """Grace left (0 once over)."""
        return max(self.deadline - time.monotonic(), 0.0) if self.draining else 0.0


def _exempt(scope: Scope) -> bool:
    path = scope.get("path", "")
    return path in _STILL_OPEN or (scope.get("method") == "POST" and path.endswith("/cancel"))


class DrainMiddleware:
    """Refuses new work while draining, and counts the work it let through."""

    def __init__(self, app: ASGIApp, drain: DrainState, *, retry_after_s: int = 1) -> None:
        self.app = app
        self.drain = drain
        self.retry_after_s = retry_after_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if _exempt(scope):
            if self.drain.draining and scope.get("path") == "/health":
                await self._draining_health(scope, send)
                return
            await self.app(scope, receive, send)
            return
        if self.drain.draining:
            await send_error(scope, send, UnavailableError(
                "the server is draining before it shuts down; retry the request (another replica "
                "will take it)", code="draining"),
                [(b"retry-after", str(self.retry_after_s).encode()), (b"connection", b"close")])
            return
        self.drain.active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.drain.active -= 1

    async def _draining_health(self, scope: Scope, send: Send) -> None:
        state = getattr(scope.get("app"), "state", None)
        afm = getattr(state, "afm", None)
        body = json.dumps({"status": "draining", "version": __version__,
                           "requests_in_flight": len(afm.registry) if afm is not None else 0,
                           "drain_remaining_s": round(self.drain.remaining_s, 3)}).encode()
        await send({"type": "http.response.start", "status": 503,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"retry-after", str(self.retry_after_s).encode())]})
        await send({"type": "http.response.body",
                    "body": b"" if scope.get("method") == "HEAD" else body})


async def drain(app: Any, seconds: float) -> None:
    """Drain ``app``: refuse new work, wait up to ``seconds`` for running requests, cancel the
    rest (``finish_reason: "cancelled"``) and wait for their responses to end."""
    state: DrainState = app.state.drain
    state.begin(seconds)
    afm = getattr(app.state, "afm", None)
    log.info("SIGTERM: draining %d request(s) for up to %gs", state.active, seconds)
    while state.active and time.monotonic() < state.deadline:
        await asyncio.sleep(_POLL_S)
    if not state.active:
        log.info("drained: no request left")
        return
    cancelled = 0
    hard_stop = time.monotonic() + CANCEL_GRACE_S
    # Repeated: a request still compiling when the grace ended registers afterwards.
    while state.active and time.monotonic() < hard_stop:
        if afm is not None:
            for owner, request_id in afm.registry.ids():
                if afm.registry.cancel(owner, request_id) is None:
                    cancelled += 1
        await asyncio.sleep(_POLL_S)
    log.warning("drain grace of %gs over: cancelled %d request(s); %d still open", seconds, cancelled,
                state.active)


class DrainingServer(uvicorn.Server):
    """uvicorn, whose SIGTERM drains the app first (see the module doc) and exits 0."""

    def __init__(self, config: uvicorn.Config, app: Any, drain_seconds: float) -> None:
        super().__init__(config)
        self.app = app
        self.drain_seconds = drain_seconds
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_requested = False
        self._draining: asyncio.Future[None] | None = None

    async def serve(self, sockets: Any = None) -> None:
        """uvicorn's serve, remembering the loop the signal handler schedules the drain on."""
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """First SIGTERM: drain, then exit; anything else: uvicorn's own handling."""
        if sig != signal.SIGTERM or self._loop is None or not self.started:
            super().handle_exit(sig, frame)
            return
        if self._drain_requested:  # a second SIGTERM: stop waiting
            self.should_exit = True
            return
        self._drain_requested = True
        # Not recorded in _captured_signals: uvicorn would re-raise it and the exit status
        # would be the signal's, where a drained server exits 0.
        self._loop.call_soon_threadsafe(self._start_drain)

    def _start_drain(self) -> None:
        self._draining = asyncio.ensure_future(self._drain_then_exit())

    async def _drain_then_exit(self) -> None:
        try:
            await drain(self.app, self.drain_seconds)
        finally:
            self.should_exit = True


def run(app: Any, settings: ServerSettings) -> int:
    """Serve ``app`` until SIGTERM (drained) or SIGINT; 0 after a drain."""
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level=settings.log_level,
                            timeout_graceful_shutdown=5, http=http_protocol(settings),
                            log_config=uvicorn_log_config(settings.log_format, settings.log_content))
    DrainingServer(config, app, settings.drain_seconds).run()
    return 0
