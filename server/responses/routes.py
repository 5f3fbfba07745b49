"""``POST /v1/responses``: the adapter makes the plan, the core admits and runs it, the
Responses encoder writes its events (SSE) or its response object; a finished response is kept
when the app has a store and the request did not say ``store: false``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from ..admission import Prepared, admit, prepare, response_headers
from ..profile import parse_profile_header
from ..routes import SSEResponse, _close_on_disconnect
from ..run import collect, sse_body
from ..schemas import ErrorEnvelope
from ..state import ServerState
from .adapter import Echo, plan_responses
from .encoder import ResponsesBody, ResponsesStream
from .items import input_turns
from .schemas import ResponsesRequest
from .storage import ResponseKeeper, input_items, unknown_response

router = APIRouter()

DEFAULT_OWNER = "default"
_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorEnvelope} for status in (400, 404, 409, 413, 500, 503)
}


def owner_of(request: Request) -> str:
    """Whose responses these are (the tenant of the API key when tenants are configured)."""
    return getattr(request.state, "owner", None) or DEFAULT_OWNER


def keeper_of(request: Request) -> ResponseKeeper | None:
    """The app's response store (None: responses are not kept)."""
    return getattr(request.app.state, "response_keeper", None)


@router.post("/v1/responses", response_model=None,
             responses={200: {"content": {"text/event-stream": {}}}, **_ERRORS})
async def create_response(body: ResponsesRequest, request: Request) -> StreamingResponse | JSONResponse:
    """Create a model response (SSE events when ``stream`` is true)."""
    state: ServerState = request.app.state.afm
    started = time.perf_counter()
    keeper = keeper_of(request)
    owner = owner_of(request)
    history = None
    if body.previous_response_id is not None:
        if keeper is None:
            raise unknown_response(body.previous_response_id, "previous_response_id")
        items = await asyncio.to_thread(keeper.conversation, owner, body.previous_response_id)
        history = input_turns(None, items)
    store = keeper is not None and body.store is not False
    plan, echo = await plan_responses(state, body, request_id=request.state.request_id,
                                      profile_key=parse_profile_header(request.headers.get("x-afm-profile")),
                                      history=history, store=store)
    prepared = await prepare(state, plan, started=started)
    tokenizer = state.loaded.tokenizer

    def encoder() -> ResponsesStream:
        return ResponsesStream(prepared.ident, echo.fields, custom_tools=echo.custom_tools,
                               new_id=state.ids.new_id, count_tokens=lambda text: len(tokenizer.encode(text)))

    keep: Callable[[dict[str, Any]], Any] | None = None
    if store and keeper is not None:
        kept_input = input_items(body.input)

        def keep(response: dict[str, Any]) -> Any:
            return asyncio.to_thread(keeper.keep, owner, response, kept_input)

    return await respond(request, state, prepared, echo, encoder, keep)


async def respond(request: Request, state: ServerState, prepared: Prepared, echo: Echo,
                  encoder: Callable[[], ResponsesStream],
                  keep: Callable[[dict[str, Any]], Any] | None) -> StreamingResponse | JSONResponse:
    """Admit ``prepared`` and answer: the event stream or the response object, kept at the end
    when ``keep`` is given; the run stops when the client goes away."""
    run = admit(state, prepared)
    headers = response_headers(prepared)
    if prepared.plan.delivery.stream:
        stream = encoder()

        async def frames() -> AsyncIterator[bytes]:
            for frame in stream.start():
                yield frame
            async for frame in sse_body(run, stream):
                yield frame
            if keep is not None:
                await keep(stream.final())

        return SSEResponse(frames(), headers=headers, on_close=run.close)
    watcher = asyncio.create_task(_close_on_disconnect(request, run.close))
    try:
        result = await collect(run, ResponsesBody(encoder()))
    finally:
        watcher.cancel()
        run.close()
    if keep is not None:
        await keep(result)
    return JSONResponse(result, headers=headers)
