"""One record per HTTP request, for the metrics and the request log.

:class:`ObserveMiddleware` (pure ASGI: it sees streams end and clients leave) times each
request, captures its status and error type, and reads what the handler left in the request's
state: the prepared request (``afm_prepared``: constraint mode, compile results) and the run
(``afm_run``: finish reason, token counts, timings).  When the response has ended it builds a
:class:`RequestRecord`, feeds :class:`~server.metrics.ServerMetrics` and writes one log line
(logger ``afm_struct.requests``: key=value text, or one JSON object with ``--log-format json``).

Prompt and output text are logged only with ``--log-content``; API keys never are (the tenant
is its label, :mod:`server.tenants`: the key's name, or a short hash of the key).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from afm_struct.turn.outputs import FinishReason

from .metrics import ServerMetrics
from .request_record import UNAUTHENTICATED, RequestRecord
from .tenants import Tenant

if TYPE_CHECKING:
    from afm_struct.models.tokenizer import Tokenizer

log = logging.getLogger("afm_struct.requests")
# An error body is parsed for its type; larger bodies are not errors this server writes.
_ERROR_BODY_LIMIT = 1 << 16
def endpoint_of(scope: Scope, routes: Sequence[BaseRoute] = ()) -> str:
    """The route template the path belongs to (bounded label values), ``other`` for none.
    Requests refused before routing (401, 413, 503 draining) are matched against ``routes``."""
    route = scope.get("route")
    if route is None:
        route = next((r for r in routes if r.matches(scope)[0] != Match.NONE), None)
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "other"


def _rung(constraint: Any) -> str | None:
    rung = getattr(constraint, "rung", None)
    return None if rung is None else str(getattr(rung, "value", rung))


def constraint_mode(prepared: Any) -> tuple[str, str | None]:
    """(mode, rung) of a prepared request: ``tools``, ``json_schema``, ``json_object``,
    ``regex``, ``lark`` (grammars: Lark, GBNF), ``structural_tag`` or ``text``, and the downgrade
    ladder's rung of the constraint that owns the mask."""
    tools = getattr(prepared, "tools", None)
    if tools is not None:
        return "tools", _rung(getattr(tools, "constraint", None))
    plan = getattr(prepared, "structured", None)
    constraint = getattr(plan, "constraint", None)
    kind = getattr(constraint, "kind", None)
    if kind in ("json_schema", "json_object", "regex", "lark", "structural_tag"):
        return str(kind), _rung(constraint)
    if plan is not None and getattr(plan, "json_output", False):  # a test's stand-in compiler
        return ("json_schema" if getattr(plan, "strict", False) else "json_object"), _rung(constraint)
    return "text", None


def downgraded_rung(prepared: Any) -> str | None:
    """The rung a downgraded request runs on (the response format's or the tools'), else None."""
    for owner in (getattr(prepared, "structured", None), getattr(prepared, "tools", None)):
        if owner is not None and getattr(owner, "downgraded", False):
            return _rung(getattr(owner, "constraint", None)) or "unconstrained"
    return None


def compiles_of(prepared: Any) -> list[tuple[str, float, bool]]:
    """(kind, seconds, cache hit) of each constraint compiled for ``prepared``."""
    out = []
    for owner in (getattr(prepared, "structured", None), getattr(prepared, "tools", None)):
        constraint = getattr(owner, "constraint", None)
        compile_ms = getattr(constraint, "compile_ms", None)
        if compile_ms is None:
            continue  # no constraint, or a test's stand-in compiler
        out.append((str(getattr(constraint, "kind", "other")), compile_ms / 1e3,
                    bool(getattr(constraint, "cached", False))))
    return out


def fill_from_handler(rec: RequestRecord, state: dict[str, Any], started: float, *,
                      with_content: bool, tokenizer: Tokenizer | None = None) -> None:
    """What the chat-completion handler left in the request state: mode, model, tokens, timings."""
    prepared = state.get("afm_prepared")
    if prepared is not None:
        rec.mode, rec.rung = constraint_mode(prepared)
        rec.stream = prepared.plan.delivery.stream
        rec.model = prepared.ident.model
        rec.compiles = compiles_of(prepared)
        rec.downgraded_rung = downgraded_rung(prepared)
    run = state.get("afm_run")
    outcome = run.outcome if run is not None else None
    if outcome is None:
        return
    reason, finished, error = outcome
    rec.finish_reason = str(reason)
    rec.cancelled_by_id = run.entry.cancel_requested
    if reason == FinishReason.CANCELLED and not rec.cancelled_by_id:
        rec.disconnected = True  # cancelled by the handler's close: the client went away
    if error is not None and rec.error_type is None:
        rec.error_type = error.type  # in-band, after the headers
    usage = finished.usage
    rec.prompt_tokens, rec.completion_tokens = usage.prompt_tokens, usage.completion_tokens
    rec.forced_tokens, rec.cached_tokens = usage.forced_tokens, usage.cached_tokens
    rec.reasoning_tokens = usage.reasoning_tokens
    timings = finished.timings
    if timings.first_token_s is not None:
        rec.ttft_s = (run.handle.submitted - started) + timings.queued_s + timings.first_token_s
    if with_content:
        prompt_ids = prepared.generation.prompt_ids if prepared is not None else []
        prompt = tokenizer.decode(prompt_ids) if tokenizer is not None else ""
        rec.content = {"prompt": prompt, "output": finished.text}


class ObserveMiddleware:
    """Times every HTTP request and reports it to the metrics and the request log."""

    def __init__(self, app: ASGIApp, metrics: ServerMetrics, *, log_content: bool = False,
                 routes: Sequence[BaseRoute] = ()) -> None:
        self.app = app
        self.routes = routes
        self.metrics = metrics
        self.log_content = log_content

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        state = scope.setdefault("state", {})
        client = scope.get("client")
        rec = RequestRecord(request_id=str(state.get("request_id", "-")), method=scope.get("method", "-"),
                            endpoint="other", client=f"{client[0]}:{client[1]}" if client else None)
        error_body: list[bytes] = []
        ended = False

        async def watch(message: Message) -> None:
            nonlocal ended
            if message["type"] == "http.response.start":
                rec.status = int(message["status"])
            elif message["type"] == "http.response.body":
                if rec.status >= 400 and sum(map(len, error_body)) < _ERROR_BODY_LIMIT:
                    error_body.append(message.get("body", b""))
                if not message.get("more_body", False):
                    ended = True
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except BaseException:
            if rec.status == 0:
                rec.status = 500
            raise
        finally:
            rec.latency_s = time.perf_counter() - started
            rec.endpoint = endpoint_of(scope, self.routes)
            # Set by the API-key check (inside): absent when the key was refused.
            tenant = state.get("tenant")
            rec.tenant = tenant.label if isinstance(tenant, Tenant) else UNAUTHENTICATED
            rec.disconnected = rec.status != 0 and not ended
            if error_body:
                # Ollama's error bodies carry no type: the layer that answered left it in the state.
                rec.error_type = _error_type(b"".join(error_body)) or state.get("error_type")
            self._report(scope, rec, state, started)

    def _report(self, scope: Scope, rec: RequestRecord, state: dict[str, Any], started: float) -> None:
        app_state = getattr(scope.get("app"), "state", None)
        afm = getattr(app_state, "afm", None)
        try:
            fill_from_handler(rec, state, started, with_content=self.log_content,
                              tokenizer=getattr(getattr(afm, "loaded", None), "tokenizer", None))
            self.metrics.observe(rec)
            log.info(rec.human(), extra={"afm": rec.log_fields()})
        except Exception:  # observing must never fail a request that has been answered
            log.exception("could not record request %s", rec.request_id)


def _error_type(body: bytes) -> str | None:
    """The ``error.type`` of an error envelope, None for any other body."""
    try:
        value = json.loads(body)
    except ValueError:
        return None
    error = value.get("error") if isinstance(value, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    return kind if isinstance(kind, str) else None
