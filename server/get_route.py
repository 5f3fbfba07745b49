"""GET routes that answer HEAD too: the one helper every router registers its GET routes with.

RFC 9110 asks every GET resource to answer HEAD (load balancers probe with it): the same
handler, status and headers, and the server sends no body.  The HEAD twin stays out of the
OpenAPI document.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter

Handler = Callable[..., Any]


def get_and_head(router: APIRouter, path: str, **kwargs: Any) -> Callable[[Handler], Handler]:
    """``@router.get(path, **kwargs)`` that also registers ``handler`` for HEAD on ``path``."""
    def register(handler: Handler) -> Handler:
        router.add_api_route(path, handler, methods=["HEAD"], include_in_schema=False, **kwargs)
        return router.get(path, **kwargs)(handler)
    return register
