"""API keys: ``Authorization: Bearer <key>`` (or Anthropic's ``x-api-key: <key>``) on every
route but ``/health``.

Keys come from ``--api-key`` (repeatable), the ``AFM_STRUCT_API_KEYS`` environment variable
and ``--api-key-file``; any of them is accepted.  The file and the variable hold keys separated
by commas, spaces or newlines, or ``name: key`` lines that name a key's tenant (for logs; see
:mod:`server.tenants`); ``#`` starts a comment line.  With no key configured the server is open,
as before.

Each request that passes gets its :class:`~server.tenants.Tenant` in
``scope["state"]["tenant"]`` (:data:`~server.tenants.ANONYMOUS` when no key is configured): the
owner of what it creates.

``/health`` stays open so load balancers can probe it without a secret.  The check compares
against every key with :func:`hmac.compare_digest` and never stops early, so the response time
does not reveal how much of a guess was right or which key it was close to.
"""

from __future__ import annotations

import hmac
import os
import re
from collections.abc import Iterable
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from afm_struct.errors import AfmError

from .middleware import send_error
from .playground_page import PAGE_PATHS
from .tenants import ANONYMOUS, ApiKey, Tenant, distinct_keys

ENV_VAR = "AFM_STRUCT_API_KEYS"
# Routes a prober must reach without a key, and the playground's static page (it holds no
# data; what it reads goes through the API with the key typed into it: playground_page.py).
OPEN_PATHS = frozenset({"/health", *PAGE_PATHS})
_LOOPBACK = ("127.", "::1", "localhost")


class AuthenticationError(AfmError):
    """The request has no API key, or not one this server accepts."""

    type = "invalid_request_error"
    status = 401
    code = "invalid_api_key"


# ``name: key``: a name, a colon, then at least one space (``abc:def`` stays one bare key).
_NAMED = re.compile(r"^\s*([^\s:,#]+):\s+(\S+)\s*$")


def parse_keys(text: str, source: str = "the key list") -> list[ApiKey]:
    """Keys in ``text``: ``name: key`` lines, or bare keys separated by commas, spaces or
    newlines; ``#`` starts a comment line.  Errors name the line, never the key."""
    keys: list[ApiKey] = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("#") or not line.strip():
            continue
        named = _NAMED.match(line)
        try:
            if named:
                keys.append(ApiKey(named.group(2), name=named.group(1)))
            elif re.search(r":\s", line):
                raise ValueError("a named key is one 'name: key' per line")
            else:
                keys.extend(ApiKey(k) for k in line.replace(",", " ").split())
        except ValueError as exc:
            raise AfmError(f"line {number} of {source}: {exc}") from None
    return keys


def load_api_keys(cli_keys: Iterable[str] = (), key_file: str | None = None,
                  environ: dict[str, str] | None = None) -> tuple[ApiKey, ...]:
    """Every configured key: the command line's, the key file's and ``AFM_STRUCT_API_KEYS``'s.

    Raises :class:`AfmError` when the key file cannot be read or a key is unusable.
    """
    env = os.environ if environ is None else environ
    keys: list[ApiKey] = []
    for key in cli_keys:
        try:
            keys.append(ApiKey(key.strip()))
        except ValueError:
            raise AfmError("an API key must be non-empty printable text without spaces "
                           "(check --api-key)") from None
    if key_file is not None:
        try:
            text = Path(key_file).read_text()
        except OSError as exc:
            raise AfmError(f"cannot read the API key file {key_file}: {exc.strerror}; "
                           "give a readable file with one key (or 'name: key') per line") from None
        keys.extend(parse_keys(text, f"the API key file {key_file}"))
    keys.extend(parse_keys(env.get(ENV_VAR, ""), ENV_VAR))
    try:
        return distinct_keys(keys)
    except ValueError as exc:
        raise AfmError(f"{exc} (check --api-key, --api-key-file and {ENV_VAR})") from None


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the server on this machine."""
    return host.startswith(_LOOPBACK)


def key_matches(presented: bytes, keys: tuple[bytes, ...]) -> bool:
    """Constant-time membership: every key is compared, whatever matched before."""
    return match_key(presented, [(k, ANONYMOUS) for k in keys]) is not None


def match_key(presented: bytes, keys: list[tuple[bytes, Tenant]]) -> Tenant | None:
    """The tenant of the key ``presented`` is, compared in constant time: every key is
    compared, whatever matched before."""
    found: Tenant | None = None
    for key, tenant in keys:
        if hmac.compare_digest(presented, key):
            found = tenant
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
    """401 with the error envelope unless the request carries one of ``keys``; the request's
    tenant goes in ``scope["state"]["tenant"]`` (pure ASGI, so streams are not buffered)."""

    def __init__(self, app: ASGIApp, keys: tuple[ApiKey, ...]) -> None:
        self.app = app
        self.keys = [(k.secret.encode(), k.tenant) for k in keys]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if not self.keys or scope.get("path") in OPEN_PATHS:
            scope.setdefault("state", {})["tenant"] = ANONYMOUS
            await self.app(scope, receive, send)
            return
        header = next((v for k, v in scope["headers"] if k == b"authorization"), None)
        # Anthropic's clients send the key as x-api-key: the same keys, the same tenants.
        api_key = next((v.strip() for k, v in scope["headers"] if k == b"x-api-key"), None)
        token = bearer_token(header) or api_key or None
        tenant = match_key(token, self.keys) if token is not None else None
        if tenant is not None:
            scope.setdefault("state", {})["tenant"] = tenant
            await self.app(scope, receive, send)
            return
        err = AuthenticationError(
            "missing API key: send the header 'Authorization: Bearer <key>' (or 'x-api-key: <key>')"
            if header is None and api_key is None else
            "invalid API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>' with a key "
            "this server accepts")
        await send_error(scope, send, err, [(b"www-authenticate", b'Bearer realm="afm-struct"')])
