"""Pure ASGI middleware (no BaseHTTPMiddleware: it would buffer streams and hide disconnects).

* :class:`RequestIdMiddleware` takes the inbound ``X-Request-ID`` (or makes one), stores it in
  ``scope["state"]["request_id"]`` and echoes it as ``X-Request-ID`` and ``OpenAI-Request-ID``
  on every response, errors included.
* :class:`BodyLimitMiddleware` bounds a request body: over the size limit, 413 — from
  Content-Length before reading, from a chunk header declaring more (noted by the connection),
  or while reading a chunked body (it reads the bounded body, then replays it); not all there
  within the body timeout, 408.  Both close the connection.
  After a large body, the heap's free pages go back to the OS (:mod:`afm_struct.decoding.heap`).
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from afm_struct.decoding.heap import release_free_memory
from afm_struct.errors import AfmError, InvalidRequestError, PayloadTooLargeError, RequestTimeoutError

from .sse import error_json

# Printable ASCII without '/' (the ID is a path segment of the cancel route), bounded length.
_REQUEST_ID = re.compile(r"^[!-.0-~]{1,128}$")
# A refused body may still be arriving: close the connection rather than read the rest.
_CLOSE = [(b"connection", b"close")]
# Requests with bodies at least this large give the memory they took back when they end: the
# parsed JSON, the validated request and the rendered prompt are several times the body.
RELEASE_AFTER_BODY_BYTES = 1 << 18


def new_request_id() -> str:
    """A fresh correlation ID."""
    return f"req_{uuid.uuid4().hex}"


async def send_error(scope: Scope, send: Send, err: AfmError,
                     extra: list[tuple[bytes, bytes]] = ()) -> None:  # type: ignore[assignment]
    """Answer ``err`` outside the app (``extra``: more headers), in the error shape of the
    request's path (:func:`server.sse.error_json`); its type goes in the request state for the
    request log and metrics (an Ollama body does not carry it)."""
    scope.setdefault("state", {})["error_type"] = err.type
    body = json.dumps(error_json(err, scope.get("path", ""))).encode()
    await send({"type": "http.response.start", "status": err.status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), *extra]})
    await send({"type": "http.response.body", "body": body})


class RequestIdMiddleware:
    """Correlation IDs in, correlation IDs out."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        inbound = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"x-request-id"), None)
        request_id = inbound if inbound is not None else new_request_id()
        echo = request_id.encode("latin-1") if _REQUEST_ID.match(request_id) else new_request_id().encode()
        extra = [(b"x-request-id", echo), (b"openai-request-id", echo)]
        if inbound is not None and not _REQUEST_ID.match(inbound):
            await send_error(scope, send, InvalidRequestError(
                "X-Request-ID must be 1-128 printable ASCII characters without '/' or spaces",
                param="X-Request-ID", code="invalid_request_id"), extra)
            return
        scope.setdefault("state", {})["request_id"] = request_id

        async def send_with_ids(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                message["headers"] = [*message.get("headers", []),
                                      *(h for h in extra if h[0] not in names)]
            await send(message)

        await self.app(scope, receive, send_with_ids)


class BodyLimitMiddleware:
    """413 for request bodies larger than ``max_bytes``, 408 for bodies not complete within
    ``timeout_s`` of the request's headers (None: no limit)."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await send_error(scope, send, self._too_large(int(length)), _CLOSE)
            return
        if scope.get("method") not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        # Read the whole (bounded) body first: a limit hit while the framework parses would be
        # reported as a parse error, and a chunked body has no Content-Length to check.  The
        # deadline covers the whole body, so a client trickling bytes cannot hold it open.
        parts: list[bytes] = []
        seen = 0
        try:
            async with asyncio.timeout(self.timeout_s):
                while True:
                    message = await receive()
                    if message["type"] != "http.request":  # the client went away mid-body
                        return
                    parts.append(message.get("body", b""))
                    seen += len(parts[-1])
                    # A chunk header declaring more than the limit (server/connection.py):
                    # refused now, not after waiting for bytes that would be refused anyway.
                    state = scope.setdefault("state", {})
                    state["body_bytes_seen"] = seen
                    declared = state.get("declared_body_bytes", 0)
                    if seen > self.max_bytes or declared > self.max_bytes:
                        await send_error(scope, send, self._too_large(max(seen, declared)), _CLOSE)
                        return
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            await send_error(scope, send, RequestTimeoutError(
                f"the request body did not arrive within {self.timeout_s:g} s ({seen} bytes "
                "received); send it without pausing", param="body"), _CLOSE)
            return
        body: bytes | None = b"".join(parts)
        parts.clear()

        async def replay() -> Message:
            nonlocal body
            if body is not None:
                message: Message = {"type": "http.request", "body": body, "more_body": False}
                body = None
                return message
            return await receive()  # afterwards: http.disconnect, for disconnect watchers

        try:
            await self.app(scope, replay, send)
        finally:
            body = None
            if seen >= RELEASE_AFTER_BODY_BYTES:
                await asyncio.to_thread(release_free_memory)

    def _too_large(self, size: int) -> PayloadTooLargeError:
        return PayloadTooLargeError(
            f"the request body has {size}+ bytes; the limit is {self.max_bytes} bytes", param="body")
