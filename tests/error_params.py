"""Every 4xx the suite's live servers send names a place that exists in its request.

Each app :func:`server.live.start_server` builds gets an outermost ASGI recorder: for every 4xx
JSON response it keeps the request (method, path, headers, body) and the error.  After each test
the errors recorded during it are checked: ``param`` must be ``null``, a path that resolves in
the request's JSON body (``messages.0.content``; for a missing field, a path whose parent
resolves), or one of the documented names that are not body fields (:data:`OUTSIDE_BODY`).
A failure names the test that provoked the response, with the request and the error.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Error params that are not body paths, each where docs/protocol.md documents it: a request
# header, the body as a whole (413; 408 for one not received in time), the path segments of the
# cancel and model routes.
OUTSIDE_BODY = {
    "X-Request-ID": lambda r: "x-request-id" in r.headers,
    "body": lambda r: r.status in (408, 413),
    "request_id": lambda r: r.path.endswith("/cancel"),
    "model": lambda r: r.method in ("GET", "HEAD") and r.path.startswith("/v1/models/"),
    # the query parameters of the stored responses' routes
    "stream": lambda r: r.method in ("GET", "HEAD") and r.path.startswith("/v1/responses/"),
    **{name: (lambda r: r.method in ("GET", "HEAD") and r.path.endswith("/input_items"))
       for name in ("limit", "order", "after")},
    # the form fields of a file upload, and the query of the file and batch lists (docs/batches.md)
    **{name: (lambda r: r.method == "POST" and r.path == "/v1/files") for name in ("file", "purpose")},
}
_LISTS = ("/v1/files", "/v1/batches")
for _name in ("limit", "after"):
    _old = OUTSIDE_BODY[_name]
    OUTSIDE_BODY[_name] = (lambda r, old=_old: old(r) or (r.method in ("GET", "HEAD") and r.path in _LISTS))


@dataclass(frozen=True)
class Record:
    """One 4xx response and the request it answered."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    status: int
    error: dict[str, Any]

    def request_json(self) -> Any:
        try:
            # An integer too long for Python to read is still at its path (a 400 names it).
            return json.loads(self.body, parse_int=lambda s: int(s) if len(s) <= 4000 else s)
        except ValueError:
            return None


class ErrorRecorder:
    """Outermost ASGI middleware: records each 4xx JSON error with its request."""

    def __init__(self, app: ASGIApp, records: list[Record]) -> None:
        self.app = app
        self.records = records

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body = bytearray()
        out = bytearray()
        status = 0

        async def recording_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                body.extend(message.get("body", b""))
            return message

        async def recording_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and 400 <= status < 500:
                out.extend(message.get("body", b""))
                if not message.get("more_body", False):
                    # Recorded before the client can read the response (and end its test).
                    self._record(scope, bytes(body), status, bytes(out))
            await send(message)

        await self.app(scope, recording_receive, recording_send)

    def _record(self, scope: Scope, body: bytes, status: int, out: bytes) -> None:
        try:
            error = json.loads(out).get("error")
        except (ValueError, AttributeError):
            return
        if isinstance(error, dict):
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            self.records.append(Record(scope["method"], scope["path"], headers, body, status, error))


def resolves(node: Any, parts: list[str], *, missing_ok: bool = False) -> bool:
    """True when ``parts`` walks ``node`` (keys may hold dots: every split is tried); with
    ``missing_ok`` the last part may be absent from an object that exists."""
    if not parts:
        return True
    if isinstance(node, dict):
        for key, value in node.items():
            size = len(str(key).split("."))
            if ".".join(parts[:size]) == str(key) and resolves(value, parts[size:], missing_ok=missing_ok):
                return True
        return missing_ok and len(parts) == 1
    if isinstance(node, list) and parts[0].isdigit() and int(parts[0]) < len(node):
        return resolves(node[int(parts[0])], parts[1:], missing_ok=missing_ok)
    return False


def wrong_param(record: Record) -> str | None:
    """Why ``record``'s param does not name a place in its request (None: it does)."""
    param = record.error.get("param")
    if param is None:
        return None
    if param in OUTSIDE_BODY and OUTSIDE_BODY[param](record):
        return None
    body = record.request_json()
    missing = record.error.get("code") == "missing_required_parameter"
    if resolves(body, str(param).split("."), missing_ok=missing):
        return None
    return f"param {param!r} is not a path of the request"


_RECORDS: list[Record] = []  # appended by the servers' threads (list.append is atomic)


@pytest.fixture(scope="session", autouse=True)
def record_error_responses() -> Iterator[list[Record]]:
    """Every live server of the session records its 4xx errors (see the module docstring)."""
    import server.live

    create_app = server.live.create_app

    def recording_app(*args: Any, **kwargs: Any) -> Any:
        app = create_app(*args, **kwargs)
        app.add_middleware(ErrorRecorder, records=_RECORDS)
        return app

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(server.live, "create_app", recording_app)
        yield _RECORDS


@pytest.fixture(autouse=True)
def error_params_name_request_paths(record_error_responses: list[Record]) -> Iterator[None]:
    """After each test: the 4xx errors its requests got name places in those requests."""
    start = len(record_error_responses)
    yield
    new = record_error_responses[start:]
    problems = [(why, r) for r in new if (why := wrong_param(r)) is not None]
    if problems:
        lines = [f"{why}: {r.method} {r.path} -> {r.status} {r.error}\n    request: {r.body[:300]!r}"
                 for why, r in problems]
        pytest.fail("error param is not the request path of the bad value:\n" + "\n".join(lines),
                    pytrace=False)
