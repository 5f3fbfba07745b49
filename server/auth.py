"""API keys: ``Authorization: Bearer <key>`` on every route but ``/health``.

Keys come from ``--api-key`` (repeatable), the ``AFM_STRUCT_API_KEYS`` environment variable
(comma- or whitespace-separated) and ``--api-key-file`` (one key per line, ``#`` comments); any
of them is accepted.  With no key configured the server is open, as before.

``/health`` stays open so load balancers can probe it without a secret.  The check compares
against every key with :func:`hmac.compare_digest` and never stops early, so the response time
does not reveal how much of a guess was right or which key it was close to.
"""

from __future__ import annotations

import hmac
import json
import os
from collections.abc import Iterable
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from afm_struct.errors import AfmError

from .sse import error_envelope

ENV_VAR = "AFM_STRUCT_API_KEYS"
# Routes a prober must reach without a key.
OPEN_PATHS = frozenset({"/health"})
_LOOPBACK = ("127.", "::1", "localhost")


class AuthenticationError(AfmError):
    """The request has no API key, or not one this server accepts."""

    type = "invalid_request_error"
    status = 401
    code = "invalid_api_key"


def parse_keys(text: str) -> list[str]:
    """Keys in ``text``: separated by commas, spaces or newlines; ``#`` starts a comment line."""
    keys: list[str] = []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        keys.extend(k for k in line.replace(",", " ").split() if k)
    return keys


def load_api_keys(cli_keys: Iterable[str] = (), key_file: str | None = None,
                  environ: dict[str, str] | None = None) -> tuple[str, ...]:
    """Every configured key: the command line's, the key file's and ``AFM_STRUCT_API_KEYS``'s.

    Raises :class:`AfmError` when the key file cannot be read or a key is unusable.
    """
    env = os.environ if environ is None else environ
    keys = [k.strip() for k in cli_keys]
    if key_file is not None:
        try:
            keys.extend(parse_keys(Path(key_file).read_text()))
        except OSError as exc:
            raise AfmError(f"cannot read the API key file {key_file}: {exc.strerror}; "
                           "give a readable file with one key per line") from None
    keys.extend(parse_keys(env.get(ENV_VAR, "")))
    for key in keys:
        if not key or any(c.isspace() or not c.isprintable() for c in key):
            raise AfmError("an API key must be non-empty printable text without spaces "
                           f"(check --api-key, --api-key-file and {ENV_VAR})")
    return tuple(dict.fromkeys(keys))  # distinct, in order


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the server on this machine."""
    return host.startswith(_LOOPBACK)


def key_matches(presented: bytes, keys: tuple[bytes, ...]) -> bool:
    """Constant-time membership: every key is compared, whatever matched before."""
    found = False
    for key in keys:
        found |= hmac.compare_digest(presented, key)
    return found


def bearer_token(header: bytes | None) -> bytes | None:
    """The token of an ``Authorization: Bearer <token>`` header (scheme case-insensitive)."""
    if header is None:
        return None
    scheme, _, token = header.strip().partition(b" ")
    if scheme.lower() != b"bearer" or not token.strip():
        return None
    return token.strip()


class ApiKeyMiddleware:
    """401 with the error envelope unless the request carries one of ``keys`` (pure ASGI, so
    streams are not buffered)."""

    def __init__(self, app: ASGIApp, keys: tuple[str, ...]) -> None:
        self.app = app
        self.keys = tuple(k.encode() for k in keys)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.keys or scope.get("path") in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        header = next((v for k, v in scope["headers"] if k == b"authorization"), None)
        token = bearer_token(header)
        if token is not None and key_matches(token, self.keys):
            await self.app(scope, receive, send)
            return
        err = AuthenticationError(
            "missing API key: send the header 'Authorization: Bearer <key>'" if header is None else
            "invalid API key: the Authorization header must be 'Bearer <key>' with a key this "
            "server accepts")
        body = json.dumps(error_envelope(err)).encode()
        await send({"type": "http.response.start", "status": err.status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"www-authenticate", b'Bearer realm="afm-struct"')]})
        await send({"type": "http.response.body", "body": body})
