"""The error tree of afm-struct.

Every error is a value with a machine-readable ``type``, a message a user can act on and the
HTTP status the server maps it to. Nothing in the engine raises a bare exception across a
public boundary::

    AfmError
    ├── ModelLoadError          (the model file is missing, corrupt or of an unsupported kind)
    ├── InvalidRequestError     (400: bad parameters, bad messages)
    │   ├── ContextOverflowError
    │   ├── SchemaError         (invalid JSON Schema / grammar, with the JSON path of the problem)
    │   ├── GrammarLimitError   (the constraint needs more grammar-engine work than its limits)
    │   ├── UnsatisfiableError  (no output can satisfy the constraint: an empty language)
    │   └── UnknownToolError
    ├── NotFoundError           (404)
    ├── RequestTimeoutError     (408: the request body did not arrive in time)
    ├── PayloadTooLargeError    (413)
    ├── OverloadedError         (503, with a retry-after hint)
    ├── UnavailableError        (503: the engine stopped; this replica cannot serve)
    └── GenerationError         (500: a failure while generating)
"""

from __future__ import annotations

import logging


class AfmError(Exception):
    """Base class: ``type`` names the error, ``status`` is its HTTP status, ``param`` the field."""

    type: str = "server_error"
    status: int = 500
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code

    def to_dict(self) -> dict[str, str | None]:
        """The OpenAI-style error body fields."""
        return {"message": self.message, "type": self.type, "param": self.param, "code": self.code}


class ModelLoadError(AfmError):
    """The model could not be loaded; the message says what to do about it."""

    type = "model_load_error"
    status = 500
    code = "model_load_failed"


class InvalidRequestError(AfmError):
    """The request is malformed or asks for something impossible."""

    type = "invalid_request_error"
    status = 400


class ContextOverflowError(InvalidRequestError):
    """The prompt (plus the requested completion) does not fit the model's context."""

    code = "context_length_exceeded"


class SchemaError(InvalidRequestError):
    """A JSON Schema, regex or grammar is invalid; ``path`` points at the problem."""

    code = "invalid_schema"

    def __init__(self, message: str, *, path: str = "$", param: str | None = None) -> None:
        super().__init__(f"{message} (at {path})", param=param)
        self.path = path
        self.detail = message

    def at(self, param: str, prefix: str = "$") -> SchemaError:
        """This error for a schema that sits at ``param`` in the request, ``prefix`` being that
        place as a JSON path (``$.tools[0].function.parameters``): the engine checks a schema
        without knowing where the request carried it."""
        return SchemaError(self.detail, path=prefix + self.path[1:], param=param)


class GrammarLimitError(InvalidRequestError):
    """The constraint needs more grammar-engine work than the engine's limits allow: a pattern
    or literal forcing a very long run of text, or a grammar too ambiguous.  Raised before
    generation with ``param`` at the schema part, or during it (``param`` unknown then)."""

    code = "grammar_too_complex"


class UnsatisfiableError(InvalidRequestError):
    """No output satisfies the constraint: its language is empty (a rule that only refers to
    itself, a range holding no multiple of ``multipleOf``), found when it is compiled (with
    ``param``) or when generation reaches a point no token can extend."""

    code = "constraint_unsatisfiable"


class UnknownToolError(InvalidRequestError):
    """``tool_choice`` names a function that is not among ``tools``."""

    code = "unknown_tool"


class NotFoundError(AfmError):
    """The named model, request or resource does not exist."""

    type = "not_found_error"
    status = 404
    code = "not_found"


class RequestTimeoutError(AfmError):
    """The request body did not arrive within the server's body timeout."""

    type = "invalid_request_error"
    status = 408
    code = "request_timeout"


class PayloadTooLargeError(AfmError):
    """The request body exceeds the configured limit."""

    type = "invalid_request_error"
    status = 413
    code = "payload_too_large"


class OverloadedError(AfmError):
    """The request queue is full; retry after ``retry_after`` seconds."""

    type = "overloaded_error"
    status = 503
    code = "queue_full"

    def __init__(self, message: str, *, retry_after: int = 1, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.retry_after = retry_after


class UnavailableError(AfmError):
    """The generation engine stopped after an internal failure: this replica cannot serve
    (``/health`` says so too); the request should go to another replica."""

    type = "server_error"
    status = 503
    code = "engine_unavailable"


class GenerationError(AfmError):
    """Generation failed after it started (model or matcher failure)."""

    type = "server_error"
    status = 500
    code = "generation_failed"


_log = logging.getLogger("afm_struct")


def internal_error(exc: BaseException | str, request_ids: list[str] | tuple[str, ...] = (),
                   *, what: str = "generation failed") -> GenerationError:
    """The client-facing error for a failure inside the engine (MLX, a grammar engine, a bug).

    The exception's text (shapes, parser state, tracebacks) goes to the server log under the
    requests' IDs; the client gets a short message and ``generation_failed`` with the ID to
    quote, never the engine's words.
    """
    ids = ", ".join(i for i in request_ids if i) or "-"
    if isinstance(exc, BaseException):
        _log.error("%s (request %s)", what, ids, exc_info=exc)
    else:
        _log.error("%s (request %s): %s", what, ids, exc)
    return GenerationError(f"{what}: an internal error in the model or grammar engine; the server "
                           "log has the details under this request's ID")

