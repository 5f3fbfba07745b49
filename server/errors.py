"""Every failure becomes a JSON error body with the right status — never FastAPI's 422 shape
and never a bare 500 page: the OpenAI envelope, or Ollama's ``{"error": "message"}`` on
Ollama's routes (:func:`server.sse.error_json`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from afm_struct.errors import AfmError, GenerationError, InvalidRequestError, NotFoundError, OverloadedError

from .sse import error_json

log = logging.getLogger("afm_struct.server")


class MethodNotAllowedError(InvalidRequestError):
    """The path exists but not with this method."""

    status = 405
    code = "method_not_allowed"


def validation_error(errors: Sequence[Any], body: Any = None) -> InvalidRequestError:
    """Map pydantic/FastAPI validation errors (plain dicts) to one 400 error naming the field.

    ``param`` is the request path of the bad value, read against ``body`` (the parsed request):
    pydantic's ``loc`` also names union branches and discriminator tags
    (``response_format.json_schema.json_schema.name``), which are not in the request.
    """
    if not errors:
        return InvalidRequestError("the request body is invalid")
    first = errors[0]
    if first.get("type") == "json_invalid":
        loc = [p for p in first.get("loc", ()) if p != "body"]
        ctx = first.get("ctx") or {}
        where = f" at position {loc[0]}" if loc else ""
        return InvalidRequestError(
            f"the body is not valid JSON{where}: {ctx.get('error', first.get('msg', ''))}",
            code="invalid_json")
    # A union reports one error per branch: the one that got deepest into the request is the
    # one about what the client meant ({"type": "function"} lacks "function", not a string).
    paths = [_path_of(e, body) for e in errors]
    # Among branches equally deep, one whose type matched (a list too long) beats a type
    # mismatch ("should be a valid string"): it is about the value the client sent.
    best = max(range(len(errors)),
               key=lambda i: (len(paths[i]), not str(errors[i].get("type")).endswith("_type")))
    chosen, param = errors[best], ".".join(str(p) for p in paths[best])
    missing = chosen.get("type") == "missing"
    msg = chosen.get("msg", "invalid")
    if chosen.get("type") == "string_unicode":  # a lone UTF-16 surrogate ("\\ud800")
        msg = "a lone UTF-16 surrogate is not Unicode text; send valid UTF-8 or surrogate pairs"
    more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    code = "missing_required_parameter" if missing else "invalid_value"
    return InvalidRequestError(f"{param or 'body'}: {msg}{more}", param=param or None, code=code)


def _path_of(error: Any, body: Any) -> list[Any]:
    loc = [p for p in error.get("loc", ()) if p != "body"]
    if body is None:
        return _without_branch_names(loc)
    return _request_path(loc, body, missing=error.get("type") == "missing")


def _request_path(loc: Sequence[Any], body: Any, *, missing: bool) -> list[Any]:
    """The part of ``loc`` that walks ``body``: the steps that are not in it are union branches
    and tags pydantic adds (a missing field, the last step, is kept: it is what to send)."""
    node, path = body, []
    for i, step in enumerate(loc):
        if isinstance(node, dict) and step in node:
            node = node[step]
        elif isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node):
            node = node[step]
        elif missing and i == len(loc) - 1 and isinstance(node, dict):
            pass
        else:
            continue
        path.append(step)
    return path


def _without_branch_names(loc: Sequence[Any]) -> list[Any]:
    """``loc`` without pydantic's union-branch names (e.g. "str", "list[...]"), when the body
    is not at hand."""
    return [p for p in loc
            if not (isinstance(p, str) and p[:1].isalpha() and ("[" in p or p in ("str", "int")))]


def error_response(err: AfmError, request: Request) -> JSONResponse:
    """The HTTP response of ``err`` to ``request``, in its path's error shape (503s carry
    Retry-After); the error's type goes in the request state for the request log and metrics
    (an Ollama body does not carry it)."""
    request.state.error_type = err.type
    headers = {"Retry-After": str(err.retry_after)} if isinstance(err, OverloadedError) else None
    return JSONResponse(error_json(err, request.url.path), status_code=err.status, headers=headers)


def _log_tag(request: Request) -> str:
    """``request <id>, tenant <label>`` for log lines (the label, never the key)."""
    tenant = getattr(request.state, "tenant", None)
    tag = f"request {getattr(request.state, 'request_id', None) or '-'}"
    return f"{tag}, tenant {tenant.label}" if tenant is not None else tag


async def _on_afm_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, AfmError)
    if isinstance(exc, OverloadedError):
        # Busy or draining is the replica working as designed (the client retries elsewhere):
        # a warning, so that ERROR lines stay the ones an operator must act on.
        log.warning("request refused (%s): %s", _log_tag(_request), exc.message)
    elif exc.status >= 500:
        log.error("request failed (%s): %s", _log_tag(_request), exc.message)
    return error_response(exc, _request)


async def _on_validation(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return error_response(validation_error(exc.errors(), exc.body), _request)


_METHODS = ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")


def allowed_methods(request: Request) -> str:
    """The ``Allow`` value of ``request``'s path: every method some route serves there, and
    OPTIONS.  Asked of the router method by method: Starlette's own 405 names only the first
    route on the path (GET and its HEAD twin are two routes)."""
    allowed = ["OPTIONS"]
    for method in _METHODS:
        probe = {"type": "http", "method": method, "path": request.scope["path"],
                 "root_path": request.scope.get("root_path", ""), "headers": []}
        if any(route.matches(probe)[0] is Match.FULL for route in request.app.router.routes):
            allowed.append(method)
    return ", ".join(sorted(allowed))


async def _on_http(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    err: AfmError
    if exc.status_code == 404:
        err = NotFoundError(f"no such route: {_request.method} {_request.url.path}")
    elif exc.status_code == 405:
        allow = allowed_methods(_request)
        if _request.method == "OPTIONS":  # RFC 9110: OPTIONS on a resource says what it allows
            return Response(status_code=204, headers={"Allow": allow})
        response = error_response(MethodNotAllowedError(
            f"{_request.method} is not allowed on {_request.url.path}; allowed: {allow}"), _request)
        response.headers["Allow"] = allow  # RFC 9110: a 405 carries Allow
        return response
    elif exc.status_code == 400 and exc.__cause__ is not None:
        err = body_parse_error(exc.__cause__, getattr(_request, "_body", None))
    else:
        err = InvalidRequestError(str(exc.detail))
        err.status = exc.status_code
    return error_response(err, _request)


class _LongDigits:
    """A JSON integer too long for Python to read (stands in for it while finding its path)."""

    def __init__(self, digits: str) -> None:
        self.digits = len(digits.lstrip("-"))


def _long_number_at(body: bytes | None) -> tuple[str, int] | None:
    """Where ``body`` holds an integer over Python's digit limit: its dotted path and digits."""
    if not body:
        return None
    try:
        value = json.loads(body, parse_int=lambda s: _LongDigits(s) if len(s) > 4000 else int(s))
    except (ValueError, RecursionError):
        return None
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, _LongDigits):
            return path or "body", node.digits
        if isinstance(node, dict):
            stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((f"{path}.{i}" if path else str(i), v) for i, v in enumerate(node))
    return None


def body_parse_error(cause: BaseException, body: bytes | None = None) -> InvalidRequestError:
    """The 400 for a JSON body FastAPI could not parse for a reason other than its syntax
    (its own text, "There was an error parsing the body", names neither the cause nor a fix);
    ``body``, when at hand, finds the field of an integer too long to read."""
    if isinstance(cause, ValueError) and "integer string conversion" in str(cause):
        found = _long_number_at(body)
        where, digits = found if found is not None else ("body", None)
        count = f"{digits:,} digits" if digits is not None else "too many digits"
        return InvalidRequestError(
            f"{where} is a number with {count}; a request's integers have at most 4,300 digits",
            param=where, code="invalid_value")
    if isinstance(cause, RecursionError):
        why = "it nests arrays or objects deeper than the JSON parser follows (about 1,000 levels)"
    elif isinstance(cause, UnicodeDecodeError):
        why = f"it is not UTF-8 (byte 0x{cause.object[cause.start]:02x} at offset {cause.start})"
    else:
        why = f"{type(cause).__name__}"
    return InvalidRequestError(f"the body could not be read as JSON: {why}", code="invalid_json")


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    request_id = getattr(request.state, "request_id", None)
    log.error("unexpected server error (%s)", _log_tag(request), exc_info=exc)
    # The exception's text stays in the log: clients get a fixed message and the ID to quote.
    response = error_response(GenerationError(
        "internal server error; the server log has the details under this request's ID",
        code="internal_error"), request)
    # Starlette sends this one from outside the middleware stack: add the correlation IDs here.
    if request_id:
        response.headers["X-Request-ID"] = response.headers["OpenAI-Request-ID"] = request_id
    return response


def install_error_handlers(app: FastAPI) -> None:
    """Register the error-body-producing handlers on ``app``."""
    app.add_exception_handler(AfmError, _on_afm_error)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http)
    app.add_exception_handler(Exception, _on_unexpected)
