"""The Messages API routes: ``POST /v1/messages`` (``?beta=true`` too: Claude Code's; the query
is accepted whatever it says), ``POST /v1/messages/count_tokens`` and
``POST /v1/messages/{request_id}/cancel``.

The adapter makes the plan, the core admits and runs it (:func:`server.routes.respond`: the
same admission, cancel registry, downgrade and constraint-mode headers as every door), the
Messages encoder writes its events or its message.  Headers of its own: ``X-AFM-Ignored-Tools``
(the hosted tools left out) and ``X-AFM-Max-Tokens-Clamped`` (the ``max_tokens`` asked for,
more than the context left after the prompt; the budget that ran is what it left).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from ..admission import (
    TOKENIZER_THREAD,
    Prepared,
    admit,
    plan_request_tools,
    prepare,
    response_headers,
    tokenize_prompt,
)
from ..extensions import with_extensions
from ..notes import note_headers
from ..profile import parse_profile_header
from ..routes import SSEResponse, _close_on_disconnect
from ..run import collect, sse_body
from ..state import ServerState
from ..tenants import tenant_of
from .adapter import plan_messages
from .encoder import MessagesBody, MessagesStream
from .schemas import CountTokensRequest, MessagesRequest

router = APIRouter()
log = logging.getLogger("afm_struct.server")
_ERRORS: dict[int | str, dict[str, Any]] = {status: {"description": "Anthropic's error shape"}
                                            for status in (400, 401, 404, 409, 413, 503)}


@router.post("/v1/messages", response_model=None,
             responses={200: {"content": {"text/event-stream": {}}}, **_ERRORS})
async def create_message(body: MessagesRequest, request: Request) -> StreamingResponse | JSONResponse:
    """Create a message (Anthropic's SSE events when ``stream`` is true)."""
    state: ServerState = request.app.state.afm
    started = time.perf_counter()
    plan, notes = await plan_messages(state, body, request_id=request.state.request_id,
                                      profile_key=parse_profile_header(request.headers.get("x-afm-profile")))
    plan = with_extensions(plan, request.headers)
    prepared = await prepare(state, plan, started=started)
    if notes.ignored_tools:
        log.info("request %s: hosted tools left out: %s", plan.request_id, ", ".join(notes.ignored_tools))
    ran = state.scheduler.generator.max_tokens_for(prepared.generation)
    clamped_from = body.max_tokens if ran < body.max_tokens else None
    return await respond(request, state, prepared, note_headers(notes.ignored_tools, clamped_from))


async def respond(request: Request, state: ServerState, prepared: Prepared,
                  extra: dict[str, str]) -> StreamingResponse | JSONResponse:
    """Admit ``prepared`` and answer: the event stream (``message_start`` before the first
    token) or the message; the run stops when the client goes away or a cancel names it."""
    request.state.afm_prepared = prepared  # for the metrics and the request log (server/observe.py)
    run = request.state.afm_run = admit(state, prepared, owner=tenant_of(request).owner)
    headers = {**response_headers(prepared), **extra}
    stream = MessagesStream(prepared.ident, input_tokens=len(prepared.generation.prompt_ids))
    if prepared.plan.delivery.stream:
        async def frames() -> AsyncIterator[bytes]:
            for frame in stream.start():
                yield frame
            async for frame in sse_body(run, stream):
                yield frame

        return SSEResponse(frames(), headers=headers, on_close=run.close)
    watcher = asyncio.create_task(_close_on_disconnect(request, run.close))
    try:
        result = await collect(run, MessagesBody(stream))
    finally:
        watcher.cancel()
        run.close()
    return JSONResponse(result, headers=headers)


@router.post("/v1/messages/count_tokens", response_model=None, responses=_ERRORS)
async def count_tokens(body: CountTokensRequest, request: Request) -> JSONResponse:
    """The prompt tokens a message with this body would use (``input_tokens``): rendered and
    tokenized exactly as ``POST /v1/messages`` does, tools and their prompt included."""
    state: ServerState = request.app.state.afm
    plan, notes = await plan_messages(state, body, request_id=request.state.request_id)
    with plan.paths.naming():
        tool_plan = await plan_request_tools(state, plan)
        ids = await asyncio.get_running_loop().run_in_executor(
            TOKENIZER_THREAD, tokenize_prompt, state, plan.conversation, tool_plan)
    return JSONResponse({"input_tokens": len(ids)}, headers=note_headers(notes.ignored_tools))


@router.post("/v1/messages/{request_id}/cancel", response_model=None, responses=_ERRORS)
async def cancel_message(request_id: str, request: Request) -> JSONResponse:
    """Cancel the caller's in-flight message whose ``X-Request-ID`` is ``request_id``: it ends
    at its next step with ``stop_reason: "cancelled"``.  404 (Anthropic's shape) for an ID not
    running under the caller's key."""
    err = request.app.state.afm.registry.cancel(tenant_of(request).owner, request_id)
    if err is not None:
        raise err
    return JSONResponse({"id": request_id, "cancelled": True})
