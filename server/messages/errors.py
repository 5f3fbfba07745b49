"""Anthropic's error shape: ``{"type": "error", "error": {"type": ..., "message": ...}}``.

Every error answering a request under :data:`MESSAGES_PREFIX` takes it (the route's own, the
middleware's 401 / 413 / 503, the framework's 404 and 422), and so does an ``error`` event in a
stream.  The error's type is Anthropic's name for its status (``invalid_request_error``,
``authentication_error``, ``not_found_error``, ``request_too_large``, ``rate_limit_error``,
``overloaded_error``, ``api_error``); the parameter, which Anthropic's shape has no field for,
leads the message when the message does not already name it (or the object holding it).
"""

from __future__ import annotations

from typing import Any

from afm_struct.errors import AfmError

MESSAGES_PREFIX = "/v1/messages"
TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
         404: "not_found_error", 405: "invalid_request_error", 408: "timeout_error",
         409: "invalid_request_error", 413: "request_too_large", 429: "rate_limit_error",
         503: "overloaded_error", 529: "overloaded_error"}


def error_type(err: AfmError) -> str:
    """Anthropic's error type for ``err``'s status (``api_error`` for other server errors)."""
    return TYPES.get(err.status, "invalid_request_error" if err.status < 500 else "api_error")


def anthropic_error(err: AfmError) -> dict[str, Any]:
    """The body (and stream ``error`` event) for ``err``."""
    message = err.message
    if err.param and err.param not in message and err.param.rsplit(".", 1)[0] not in message:
        message = f"{err.param}: {message}"
    return {"type": "error", "error": {"type": error_type(err), "message": message}}


def is_messages_path(path: str) -> bool:
    """``path`` is one of the Messages API's (its errors take Anthropic's shape)."""
    return path == MESSAGES_PREFIX or path.startswith(MESSAGES_PREFIX + "/")
