"""``POST /v1/completions`` and its cancel route: the adapter makes the plan, the core admits
and runs it, the legacy encoders write it (the shared path: :func:`server.routes.respond`)."""

from __future__ import annotations

import logging
import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from ..admission import prepare
from ..profile import parse_profile_header
from ..routes import ERROR_RESPONSES, respond
from ..schemas import CancellationResponse
from ..state import ServerState
from ..tenants import tenant_of
from .adapter import plan_completion
from .encoder import CompletionStream, TextCompletion, cancellation_body
from .schemas import CompletionRequest, CompletionResponse

router = APIRouter()
log = logging.getLogger("afm_struct.server")


@router.post("/v1/completions", response_model=None,
             responses={200: {"model": CompletionResponse, "content": {"text/event-stream": {}}},
                        **ERROR_RESPONSES})
async def completions(body: CompletionRequest, request: Request) -> StreamingResponse | JSONResponse:
    """Complete a raw prompt, no chat template applied (SSE when ``stream`` is true)."""
    state: ServerState = request.app.state.afm
    started = time.perf_counter()
    plan = await plan_completion(state, body, request_id=request.state.request_id,
                           profile_key=parse_profile_header(request.headers.get("x-afm-profile")))
    prepared = await prepare(state, plan, started=started)
    logprobs = plan.logprobs is not None
    echo = plan.conversation.prompt if body.echo else None
    return await respond(request, state, prepared,
                         stream=lambda: CompletionStream(prepared.ident, logprobs=logprobs, echo=echo,
                                                         include_usage=plan.delivery.include_usage),
                         body=lambda: TextCompletion(prepared.ident, logprobs=logprobs, echo=echo))


@router.post("/v1/completions/{request_id}/cancel", response_model=CancellationResponse,
             responses={404: {"model": CancellationResponse}})
async def cancel_completion(request_id: str, request: Request) -> JSONResponse:
    """Cancel the in-flight request whose X-Request-ID is ``request_id``, if the caller's key
    owns it: another tenant's request answers exactly as an unknown ID."""
    tenant = tenant_of(request)
    err = request.app.state.afm.registry.cancel(tenant.owner, request_id)
    if err is not None:
        return JSONResponse(cancellation_body(request_id, False, err), status_code=404)
    log.info("request %s cancelled (tenant %s)", request_id, tenant.label)
    return JSONResponse(cancellation_body(request_id, True))
