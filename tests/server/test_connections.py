"""Connections against hostile or unusual clients, over raw sockets (scripted model).

A stalled body gets 408, and a body over the limit 413; both close their connection.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager

from .conftest import USER


def request_bytes(body: dict | None = None, *, length: int | None = None, extra: str = "") -> bytes:
    data = json.dumps(body if body is not None else {"messages": USER}).encode()
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data) if length is None else length}\r\n{extra}\r\n").encode() + data


@contextmanager
def connect(url: str) -> Iterator[socket.socket]:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        yield sock


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a socket timeout fails the
    test: the server held the connection open)."""
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


def status_and_error(raw: bytes) -> tuple[int, dict[str, str], dict]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, json.loads(body)["error"]


# -- bodies ---------------------------------------------------------------------------------------


def test_a_stalled_body_gets_408_and_its_connection_closes(serve) -> None:
    live = serve(body_timeout_s=0.5)
    with connect(live.url) as sock:
        sock.sendall(request_bytes(length=1000)[:-10])  # the headers and part of the body
        status, headers, error = status_and_error(read_until_closed(sock))
    assert status == 408
    assert headers["connection"] == "close" and "x-request-id" in headers
    assert (error["type"], error["code"]) == ("invalid_request_error", "request_timeout")
    assert error["param"] == "body"


def test_a_body_over_the_limit_gets_413_and_its_connection_closes(serve) -> None:
    live = serve(max_body_bytes=1000)
    with connect(live.url) as sock:
        sock.sendall(request_bytes(length=10**9)[:200])
        status, headers, error = status_and_error(read_until_closed(sock))
    assert status == 413 and error["code"] == "payload_too_large"
    assert headers["connection"] == "close"
