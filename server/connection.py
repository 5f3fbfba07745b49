"""The HTTP/1.1 connection: uvicorn's h11 protocol with three gaps closed.

* **Headers in time.**  uvicorn times out an idle keep-alive connection only until the first
  byte of the next request, and a new connection never: a client that connected and sent
  nothing, or sent its headers a byte at a time (slowloris), held a connection forever.  Here
  a request's headers must be complete ``header_timeout_s`` after the connection opened or the
  previous response ended; otherwise a 408 if part of them came, and the connection is closed.
  (The body has its own deadline: :class:`server.middleware.BodyLimitMiddleware`.)
* **Connections bounded.**  A request arriving while more than ``max_connections`` connections
  are open is answered 503 with the JSON envelope and ``Retry-After``, and its connection
  closed.  Together with the body limit this bounds the memory bodies in transit can take.
* **Half-close.**  A client that shuts its sending side after a complete request
  (``shutdown(SHUT_WR)``) gets its answer.  asyncio closes a transport when the peer's FIN
  arrives unless the protocol keeps it open; uvicorn did not, so the request was cancelled as a
  disconnect and the client read nothing.  A FIN cannot tell a half-close from a client that
  closed its socket; a write can: a closed socket answers it with a reset, and the next write
  fails, which is the disconnect that cancels the generation.  A stream's own chunks are those
  writes; before a response starts, the connection is probed with an interim
  ``100 Continue`` (HTTP/1.1 clients accept unexpected 1xx responses, RFC 9110 section 15.2).
* **Chunk sizes.**  A chunked body's size is known only chunk by chunk: a chunk header
  declaring more than ``max_body_bytes`` (``40000000`` hex: 1 GiB), or more than what is left
  of it after the body read so far, left the body reader waiting
  for data that would be refused anyway, until the body timeout (408 after 30 s).  Such a
  header is noted in the request's scope (``state["declared_body_bytes"]``) the moment h11
  parses it, and the body reader woken: :class:`server.middleware.BodyLimitMiddleware` answers
  413 at once.
* **Lingering close.**  A connection closed while its client is still sending (a 408 or 413
  mid-body, a 503 over the cap) was reset by the kernel, which can destroy the response
  before the client reads it.  Closing now shuts the sending side, reads and drops what still
  comes for up to ``LINGER_S``, then closes, as nginx and Apache do.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from afm_struct.errors import OverloadedError

from .middleware import RequestIdMiddleware, send_error
from .settings import ServerSettings

_408 = json.dumps({"error": {
    "message": "the request headers did not arrive in time", "type": "invalid_request_error",
    "param": None, "code": "request_timeout"}}).encode()
_RAW_408 = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n" % len(_408)) + _408
_CONTINUE = h11.InformationalResponse(status_code=100, headers=[], reason=b"Continue")
LINGER_S = 2.0


class _LingeringTransport:
    """The connection's transport as uvicorn sees it: ``close()`` lingers (see the module
    docstring); everything else is the real transport's."""

    def __init__(self, transport: asyncio.Transport, protocol: BoundedH11Protocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self._closing = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self._closing or self._transport.is_closing()

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        real = self._transport
        if real.is_closing() or self._protocol.half_closed or not real.can_write_eof():
            real.close()  # nothing more can arrive (or no half-close to linger in)
            return
        try:
            real.write_eof()  # after the buffered response: the client reads it, then EOF
        except OSError:
            real.close()  # the peer is already gone (ENOTCONN): nothing to linger for
            return
        self._protocol.lingering = True
        self._protocol.flow.resume_reading()  # drain what the client still sends
        self._protocol.linger_timer = self._protocol.loop.call_later(LINGER_S, real.close)


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header deadline, a connection cap and half-close support
    (see the module docstring); :func:`http_protocol` sets the limits."""

    header_timeout_s: float = 10.0
    max_connections: int = 128
    max_body_bytes: int = 8 * 1024 * 1024
    retry_after_s: int = 1
    # Before a response starts, a half-closed connection is probed this often.
    probe_interval_s: float = 0.5

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._app = self.app
        self._busy = RequestIdMiddleware(self._too_many_connections)
        self._head_timer: asyncio.TimerHandle | None = None
        self._probe_timer: asyncio.TimerHandle | None = None
        self.linger_timer: asyncio.TimerHandle | None = None
        self.half_closed = False  # the client sent FIN with a request to answer
        self.lingering = False  # closing: the client's data is read and dropped

    # -- headers in time -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(_LingeringTransport(transport, self))  # type: ignore[arg-type]
        self._arm_head_timer()

    def data_received(self, data: bytes) -> None:
        if not self.lingering:  # lingering: what the client still sends is dropped
            super().data_received(data)

    def handle_events(self) -> None:
        """uvicorn's event loop over what h11 parsed; a new request cycle means its headers came
        in time, and a request over the connection cap goes to the 503 app."""
        cycle = self.cycle
        self.app = self._busy if len(self.connections) > self.max_connections else self._app
        super().handle_events()
        if self.cycle is not cycle:
            self._cancel(self._head_timer)
            self._head_timer = None
        self._check_chunk_size()

    def _check_chunk_size(self) -> None:
        """Wake the body reader when the chunk being read declares more than the body limit."""
        cycle = self.cycle
        if cycle is None or cycle.response_started or not cycle.more_body:
            return
        # h11 keeps the declared size of the chunk it is reading in its (private) reader; an
        # h11 without it just leaves the check to the body reader's byte count.
        remaining = getattr(getattr(self.conn, "_reader", None), "_bytes_in_chunk", 0)
        if not isinstance(remaining, int) or remaining <= 0:
            return
        state = cycle.scope.setdefault("state", {})
        # The body read so far (the body reader's count) plus the rest of this chunk.
        declared = state.get("body_bytes_seen", 0) + len(cycle.body) + remaining
        if declared > self.max_body_bytes:
            state["declared_body_bytes"] = declared
            cycle.message_event.set()

    def on_response_complete(self) -> None:
        """Arm the next request's header deadline (before uvicorn runs a pipelined request)."""
        if not self.transport.is_closing():
            self._arm_head_timer()
        super().on_response_complete()

    def shutdown(self) -> None:
        """The server's graceful shutdown.  An idle keep-alive connection (its last response
        written, nothing of a next request received) closes at once: lingering guards a
        response against the reset unread client data would cause, and there is none here,
        while an idle pooled client would not close its side before its next use (the
        shutdown waited the whole ``LINGER_S`` for each such connection)."""
        idle = (self.cycle is None or self.cycle.response_complete) and not self.conn.trailing_data[0]
        transport = self.transport
        if idle and isinstance(transport, _LingeringTransport) and not transport.is_closing():
            transport._closing = True
            transport._transport.close()  # asyncio writes what is buffered, then closes
            return
        super().shutdown()

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._head_timer, self._probe_timer, self.linger_timer):
            self._cancel(timer)
        self._head_timer = self._probe_timer = self.linger_timer = None
        super().connection_lost(exc)

    def _arm_head_timer(self) -> None:
        self._cancel(self._head_timer)
        self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timed_out)

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or (self.cycle is not None and not self.cycle.response_complete):
            return
        if self.conn.their_state is h11.IDLE and self.conn.trailing_data[0]:
            self.transport.write(_RAW_408)  # part of a request came: say why it is refused
        self.transport.close()

    async def _too_many_connections(self, scope: Any, receive: Any, send: Any) -> None:
        err = OverloadedError(
            f"the server has {len(self.connections)} connections open, over its limit of "
            f"{self.max_connections}; retry after {self.retry_after_s}s on a connection you "
            "keep", retry_after=self.retry_after_s, code="too_many_connections")
        await send_error(scope, send, err, [(b"retry-after", str(self.retry_after_s).encode()),
                                     (b"connection", b"close")])

    # -- half-close ----------------------------------------------------------------------------

    def eof_received(self) -> bool | None:
        """The client sent FIN.  With a complete request not yet answered, keep the connection
        open to answer it (and probe whether the client is still there); otherwise close, as
        uvicorn does (an idle connection, or a request cut short)."""
        cycle = self.cycle
        if self.lingering:
            return None  # the client is done: close now
        if self.half_closed:
            return True
        if cycle is None or cycle.response_complete or cycle.more_body or cycle.disconnected:
            return None
        self.half_closed = True
        cycle.keep_alive = False  # nothing can follow: close once answered
        self._probe()
        return True

    def _probe(self) -> None:
        self._probe_timer = None
        cycle = self.cycle
        if (self.transport.is_closing() or cycle is None or cycle.response_started
                or cycle.disconnected):
            return  # answered, or answering: the response's own writes probe from here
        if self.conn.their_http_version != b"1.0":  # HTTP/1.0 knows no 1xx: no probe
            try:
                self.transport.write(self.conn.send(_CONTINUE))
            except h11.LocalProtocolError:
                return
        self._probe_timer = self.loop.call_later(self.probe_interval_s, self._probe)

    @staticmethod
    def _cancel(timer: asyncio.TimerHandle | None) -> None:
        if timer is not None:
            timer.cancel()


def http_protocol(settings: ServerSettings) -> type[BoundedH11Protocol]:
    """The protocol class for uvicorn's ``http=`` option, with ``settings``' limits."""
    return type("BoundedH11Protocol", (BoundedH11Protocol,), {
        "header_timeout_s": settings.header_timeout_s,
        "max_connections": settings.max_connections,
        "max_body_bytes": settings.max_body_bytes,
        "retry_after_s": settings.retry_after_s})
