"""Thin HTTP handlers: a protocol's adapter makes the plan, the core admits and runs it
(:mod:`server.admission`, :mod:`server.run`), the protocol's encoder writes the response."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.types import Receive, Scope, Send

from afm_struct import __version__
from afm_struct.models.loader import ModelInfo

from .admission import Prepared, admit, prepare, response_headers
from .chat.adapter import plan_chat
from .chat.chunks import cancellation_body
from .chat.encoder import ChatCompletion, ChatStream
from .extensions import with_extensions
from .get_route import get_and_head
from .profile import parse_profile_header
from .request import check_model
from .run import BodyEncoder, StreamEncoder, collect, sse_body
from .schemas import (
    CancellationResponse,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ErrorEnvelope,
    ModelCard,
    ModelList,
)
from .state import ServerState
from .tenants import tenant_of

router = APIRouter()
log = logging.getLogger("afm_struct.server")

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorEnvelope} for status in (400, 404, 409, 413, 500, 503)
}


class SSEResponse(StreamingResponse):
    """A streaming response that always runs ``on_close`` — normal end, error or disconnect —
    so a client that goes away stops its generation."""

    def __init__(self, body: AsyncIterator[bytes], *, headers: dict[str, str],
                 on_close: Callable[[], None]) -> None:
        super().__init__(body, headers=headers)
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()


def _state(request: Request) -> ServerState:
    return request.app.state.afm  # type: ignore[no-any-return]


async def _close_on_disconnect(request: Request, close: Callable[[], None]) -> None:
    """Wait for the client to go away (the body is already read), then stop generating."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            close()
            return


@router.post("/v1/chat/completions", response_model=None,
             responses={200: {"model": ChatCompletionResponse,
                              "content": {"text/event-stream": {}}}, **ERROR_RESPONSES})
async def chat_completions(body: ChatCompletionRequest, request: Request) -> StreamingResponse | JSONResponse:
    """Create a chat completion (SSE when ``stream`` is true)."""
    state = _state(request)
    started = time.perf_counter()
    plan = await plan_chat(state, body, request_id=request.state.request_id,
                           profile_key=parse_profile_header(request.headers.get("x-afm-profile")))
    options = body.stream_options
    plan = with_extensions(plan, request.headers,
                           include_partial=bool(options and options.include_partial),
                           token_details=bool(options and options.include_token_details))
    prepared = await prepare(state, plan, started=started)
    logprobs = plan.logprobs is not None
    return await respond(request, state, prepared,
                         stream=lambda: ChatStream(prepared.ident, logprobs=logprobs,
                                                   include_usage=plan.delivery.include_usage),
                         body=lambda: ChatCompletion(prepared.ident, logprobs=logprobs))


async def respond(request: Request, state: ServerState, prepared: Prepared, *,
                  stream: Callable[[], StreamEncoder], body: Callable[[], BodyEncoder],
                  content_type: str | None = None) -> StreamingResponse | JSONResponse:
    """Admit ``prepared`` and answer with the protocol's encoders: SSE (``stream``; another
    streamed ``content_type`` such as Ollama's NDJSON) or one JSON body (``body``), the run
    stopped when the client goes away."""
    request.state.afm_prepared = prepared  # for the metrics and the request log (server/observe.py)
    run = request.state.afm_run = admit(state, prepared, owner=tenant_of(request).owner)
    headers = response_headers(prepared)
    if prepared.plan.delivery.stream:
        if content_type is not None:
            headers["Content-Type"] = content_type
        return SSEResponse(sse_body(run, stream()), headers=headers, on_close=run.close)
    watcher = asyncio.create_task(_close_on_disconnect(request, run.close))
    try:
        result = await collect(run, body())
    finally:
        watcher.cancel()
        run.close()
    return JSONResponse(result, headers=headers)


@router.post("/v1/chat/completions/{request_id}/cancel", response_model=CancellationResponse,
             responses={404: {"model": CancellationResponse}})
async def cancel_completion(request_id: str, request: Request) -> JSONResponse:
    """Cancel the in-flight request whose X-Request-ID is ``request_id``, if the caller's key
    owns it: another tenant's request answers exactly as an unknown ID."""
    tenant = tenant_of(request)
    err = _state(request).registry.cancel(tenant.owner, request_id)
    if err is not None:
        return JSONResponse(cancellation_body(request_id, False, err), status_code=404)
    log.info("request %s cancelled (tenant %s)", request_id, tenant.label)
    return JSONResponse(cancellation_body(request_id, True))


get_route = partial(get_and_head, router)


def _model_card(name: str, created: int, info: ModelInfo) -> dict[str, Any]:
    metadata = {"source": info.source, "path": info.path, "device": info.device, "stored": info.stored,
                "weights": info.weights, "weights_reason": info.weights_reason,
                "weight_bytes": info.weight_bytes, "context_length": info.context_length,
                "aliases": list(info.aliases)}
    return {"id": name, "object": "model", "created": created, "owned_by": "afm-struct",
            "metadata": metadata}


@get_route("/v1/models", response_model=ModelList)
async def list_models(request: Request) -> dict[str, Any]:
    """The one loaded model, under each name it is served as (``--served-model-name``)."""
    state = _state(request)
    created = int(request.app.state.started_at)
    return {"object": "list", "data": [_model_card(name, created, state.loaded.info)
                                       for name in state.settings.model_names(state.loaded.info.id)]}


# ``:path``: a served name may hold slashes (a hub id); clients send them as %2F.
@get_route("/v1/models/{model:path}", response_model=ModelCard, responses={404: {"model": ErrorEnvelope}})
async def retrieve_model(model: str, request: Request) -> dict[str, Any]:
    """One served name's model object, as OpenAI's ``GET /v1/models/{model}``; 404
    ``model_not_found`` (``param: model``) for a name this server does not answer to."""
    state = _state(request)
    name = check_model(model, state.settings.model_names(state.loaded.info.id),
                       aliases=state.settings.model_aliases)
    return _model_card(name, int(request.app.state.started_at), state.loaded.info)


@get_route("/health", response_model=None)
async def health(request: Request) -> dict[str, Any] | JSONResponse:
    """Liveness and load; answers while generation runs on the scheduler thread.  A replica
    whose scheduler thread died answers 503 ``unhealthy`` with the reason, so a balancer's
    health check takes it out (its requests fail fast with 503 meanwhile)."""
    state = _state(request)
    pending, capacity = state.scheduler.load
    body = {"status": "ok", "version": __version__, "model": state.loaded.info.id,
            "device": state.loaded.info.device, "requests_in_flight": pending,
            "capacity": capacity, "uptime_s": round(time.time() - request.app.state.started_at, 3),
            "rss_bytes": resident_bytes()}
    failure = state.scheduler.failure
    if failure is not None:
        return JSONResponse({**body, "status": "unhealthy", "reason": failure}, status_code=503)
    return body


def resident_bytes() -> int | None:
    """This process's resident memory (Linux /proc), for soak runs watching for leaks; None
    where /proc is absent (macOS)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
