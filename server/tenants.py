"""Who a request belongs to: the tenant behind its API key.

Every in-flight request (and every stored response) records its owner, a :class:`Tenant`'s
``owner`` string: ``name:<name>`` for a key the key file names, ``key:<sha256 of the key>`` for
an unnamed one, :data:`ANONYMOUS` when the server has no keys (one user, as before tenants).
The key itself is never stored or logged; ``label`` is what logs and metrics show.

Several keys may share a name: they are one tenant (a key being rotated), so their requests and
stored responses are shared.  The hash of an unnamed key is plain SHA-256, so an operator can
find a tenant's owner with ``printf %s "$KEY" | sha256sum``; it is also what HAProxy computes
to route a cancel (deploy/haproxy.cfg).  Use long random keys: a short one could be guessed
from its hash.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# A key's name: shown in logs and metrics, so plain and short.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class Tenant:
    """An owner identity (stored with what the tenant creates) and its label (for logs)."""

    owner: str
    label: str


ANONYMOUS = Tenant("anonymous", "anonymous")


def tenant_of(request: Any) -> Tenant:
    """The tenant a request belongs to (a Starlette ``Request``, or an ASGI scope), as the
    API key middleware (:mod:`server.auth`) set it: the owner of whatever the request creates
    or names (in-flight IDs, stored responses).  Raises RuntimeError where the middleware did
    not run, rather than guess an owner."""
    scope = request if isinstance(request, dict) else request.scope
    tenant = scope.get("state", {}).get("tenant")
    if not isinstance(tenant, Tenant):
        raise RuntimeError("no tenant on this request: ApiKeyMiddleware must wrap the app")
    return tenant


def key_digest(secret: str) -> str:
    """SHA-256 of ``secret``, hex."""
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class ApiKey:
    """An accepted key and, optionally, the tenant name it was given (``name: key`` in a key
    file).  The secret stays out of the repr."""

    secret: str = field(repr=False)
    name: str | None = None

    def __post_init__(self) -> None:
        if not self.secret or any(c.isspace() or not c.isprintable() for c in self.secret):
            raise ValueError("an API key must be non-empty printable text without spaces")
        if self.name is not None and not NAME.match(self.name):
            raise ValueError(f"an API key's name must be 1-64 letters, digits, '.', '_' or '-' "
                             f"(starting with a letter or digit), not {self.name!r}")

    @property
    def tenant(self) -> Tenant:
        """The tenant this key authenticates."""
        if self.name is not None:
            return Tenant(f"name:{self.name}", self.name)
        digest = key_digest(self.secret)
        return Tenant(f"key:{digest}", f"key-{digest[:12]}")


def owner_label(owner: str) -> str:
    """The log label of the tenant whose owner identity is ``owner`` (as :attr:`ApiKey.tenant`
    makes both): work done for a tenant outside its request (a batch line) is logged under it."""
    kind, _, rest = owner.partition(":")
    if kind == "name" and rest:
        return rest
    if kind == "key" and rest:
        return f"key-{rest[:12]}"
    return owner


def as_api_key(key: str | ApiKey) -> ApiKey:
    """``key`` as an :class:`ApiKey` (a bare string is an unnamed key)."""
    return key if isinstance(key, ApiKey) else ApiKey(key)


def distinct_keys(keys: Iterable[str | ApiKey]) -> tuple[ApiKey, ...]:
    """``keys`` without repeats, in order.  Raises ValueError when one key is given two names
    (which tenant would own its requests?); the message never holds the key."""
    seen: dict[str, ApiKey] = {}
    for key in map(as_api_key, keys):
        other = seen.setdefault(key.secret, key)
        if other.name != key.name:
            names = " and ".join(repr(n) if n else "no name" for n in (other.name, key.name))
            raise ValueError(f"one API key is given twice, with {names}; give each key one name")
    return tuple(seen.values())
