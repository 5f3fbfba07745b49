"""The Responses API routes: ``POST /v1/responses`` (the adapter makes the plan, the core admits
and runs it, the Responses encoder writes its events or its response object), and the stored
responses: ``GET`` / ``DELETE /v1/responses/{id}``, ``GET /v1/responses/{id}/input_items`` and
``POST /v1/responses/{id}/cancel``; ``POST /v1/responses/compact`` (:mod:`.compact`); and the
WebSocket mode's handshake (``GET /v1/responses`` upgraded), refused: this server streams over
SSE (docs/protocol.md says why).

A finished response is kept when the app has a store and the request did not say ``store:
false``; every id is looked up under the caller's tenant, so another tenant's id is a 404 like
an unknown one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

from fastapi import APIRouter, Request, WebSocket
from fastapi.responses import JSONResponse, StreamingResponse

from afm_struct.errors import AfmError, InvalidRequestError, NotFoundError
from afm_struct.store import ResponseStore, stored_size

from ..admission import Prepared, admit, response_headers
from ..extensions import with_extensions
from ..get_route import get_and_head
from ..notes import note_headers
from ..profile import parse_profile_header
from ..routes import SSEResponse, _close_on_disconnect
from ..run import collect, sse_body
from ..schemas import ErrorEnvelope
from ..sse import error_json
from ..state import ServerState
from ..tenants import tenant_of
from .adapter import plan_responses
from .bounds import MAX_ID, check_input_totals, check_request_fields, check_string
from .compact import (
    INSTRUCTIONS,
    PROMPT,
    CompactRequest,
    check_compact,
    compacted_output,
    compaction_object,
    summary_text,
)
from .encoder import ResponsesBody, ResponsesStream
from .items import input_turns
from .schemas import ResponsesRequest
from .storage import input_items, record, response_of, unknown_response
from .truncation import TRUNCATED_HEADER, prepare_fitting

router = APIRouter()
log = logging.getLogger("afm_struct.server")

_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorEnvelope} for status in (400, 404, 409, 413, 429, 500, 503)
}
Keep = Callable[[dict[str, Any]], Awaitable[None]]


get_route = partial(get_and_head, router)


def store_of(request: Request) -> ResponseStore | None:
    """The app's response store (None: responses are not kept)."""
    return getattr(request.app.state, "response_store", None)


def running(request: Request) -> dict[tuple[str, str], tuple[str, ResponsesStream]]:
    """(owner, response id) → (request ID, encoder) of the responses running now (cancels)."""
    table = getattr(request.app.state, "responses_running", None)
    if table is None:
        table = request.app.state.responses_running = {}
    return table  # type: ignore[no-any-return]


@router.post("/v1/responses", response_model=None,
             responses={200: {"content": {"text/event-stream": {}}}, **_ERRORS})
async def create_response(body: ResponsesRequest, request: Request) -> StreamingResponse | JSONResponse:
    """Create a model response (SSE events when ``stream`` is true)."""
    state: ServerState = request.app.state.afm
    started = time.perf_counter()
    store = store_of(request)
    owner = tenant_of(request).owner
    # Before the lookup: a 404 quotes the id it did not find.
    check_request_fields(body)
    history = None
    if body.previous_response_id is not None:
        if store is None:
            raise unknown_response(body.previous_response_id, "previous_response_id")
        items = await asyncio.to_thread(store.conversation, owner, body.previous_response_id)
        history = input_turns(None, items)
    keeping = store is not None and body.store is not False
    plan, echo = await plan_responses(state, body, request_id=request.state.request_id,
                                      profile_key=parse_profile_header(request.headers.get("x-afm-profile")),
                                      history=history, store=keeping)
    plan = with_extensions(plan, request.headers,
                           include_partial=bool(body.stream_options and body.stream_options.include_partial))
    inputs = input_items(body.input) if keeping else []
    if keeping and store is not None:
        # Before anything runs: what the tenant keeps now, and what this request adds before
        # its output (its items and the settings the response echoes).  Requests running
        # side by side are each checked alone, so they may take a tenant past it by their
        # own sizes at most; the next request is refused then.
        usage = await asyncio.to_thread(store.usage, owner)
        state.settings.store_quota.check(usage, stored_size({}, echo.fields, inputs))
    prepared, dropped = await prepare_fitting(state, plan, auto=body.truncation == "auto", started=started)
    stream = ResponsesStream(prepared.ident, echo.fields, custom_tools=echo.custom_tools,
                             new_id=state.ids.new_id)
    keep: Keep | None = None
    if keeping and store is not None:

        async def keep(response: dict[str, Any]) -> None:
            await asyncio.to_thread(store.put, record(owner, response, inputs))

    extra = {TRUNCATED_HEADER: str(dropped)} if dropped else {}
    extra.update(note_headers(echo.ignored_tools, echo.clamped_from))
    return await respond(request, state, prepared, stream, keep, owner, extra)


async def respond(request: Request, state: ServerState, prepared: Prepared, stream: ResponsesStream,
                  keep: Keep | None, owner: str, extra: dict[str, str] | None = None,
                  ) -> StreamingResponse | JSONResponse:
    """Admit ``prepared`` and answer: the event stream or the response object, kept at the end
    when ``keep`` is given; the run stops when the client goes away or a cancel names it.
    ``extra``: more response headers."""
    run = admit(state, prepared, owner=owner)
    # The response's id before its first event: a balancer routes its cancel by it
    # (deploy/haproxy.cfg), as it routes a chat cancel by X-Request-ID.
    headers = {**response_headers(prepared), "X-AFM-Response-ID": prepared.ident.id, **(extra or {})}
    table, key = running(request), (owner, prepared.ident.id)
    table[key] = (prepared.plan.request_id, stream)

    def close() -> None:
        table.pop(key, None)
        run.close()

    if prepared.plan.delivery.stream:
        async def frames() -> AsyncIterator[bytes]:
            for frame in stream.start():
                yield frame
            async for frame in sse_body(run, stream):
                yield frame
            table.pop(key, None)
            if keep is not None:
                try:
                    await keep(stream.final())
                except AfmError as err:  # the status is sent: the answer stands, unkept
                    log.error("response %s was not stored (request %s): %s", prepared.ident.id,
                              prepared.plan.request_id, err.message)

        return SSEResponse(frames(), headers=headers, on_close=close)
    watcher = asyncio.create_task(_close_on_disconnect(request, close))
    try:
        result = await collect(run, ResponsesBody(stream))
    finally:
        watcher.cancel()
        close()
    if keep is not None:
        await keep(result)
    return JSONResponse(result, headers=headers)


@router.post("/v1/responses/compact", response_model=None, responses=_ERRORS)
async def compact_conversation(body: CompactRequest, request: Request) -> JSONResponse:
    """Compact a conversation (``input``, after ``previous_response_id``'s) with the served
    model: the user's messages and a summary (:mod:`.compact`), kept like a response."""
    state: ServerState = request.app.state.afm
    started = time.perf_counter()
    check_compact(body)
    # The same bounds as a create: the id before its lookup (a 404 quotes it), and the model
    # output passed back in ``input`` (kept with the compacted result).
    check_string(body.previous_response_id, MAX_ID, "previous_response_id")
    check_input_totals(body.input)
    store = store_of(request)
    owner = tenant_of(request).owner
    items: list[dict[str, Any]] = []
    if body.previous_response_id is not None:
        if store is None:
            raise unknown_response(body.previous_response_id, "previous_response_id")
        items = await asyncio.to_thread(store.conversation, owner, body.previous_response_id)
    items += input_items(body.input)
    instructions = INSTRUCTIONS if body.instructions is None else f"{body.instructions}\n\n{INSTRUCTIONS}"
    summarize = ResponsesRequest(model=body.model, input=PROMPT, instructions=instructions, temperature=0,
                                 truncation="auto", store=False)
    plan, echo = await plan_responses(state, summarize, request_id=request.state.request_id,
                                      profile_key=None, history=input_turns(None, items), store=False)
    prepared, dropped = await prepare_fitting(state, plan, auto=True, started=started)
    stream = ResponsesStream(prepared.ident, echo.fields, custom_tools=echo.custom_tools,
                             new_id=state.ids.new_id)
    run = admit(state, prepared, owner=owner)
    watcher = asyncio.create_task(_close_on_disconnect(request, run.close))
    try:
        result = await collect(run, ResponsesBody(stream))
    finally:
        watcher.cancel()
        run.close()
    output = compacted_output(items, summary_text(result), state.ids.new_id)
    if store is not None:
        kept = {**result, "output": output, "previous_response_id": None, "store": True}
        kept_record = record(owner, kept, [])
        # The tenant's quota, as a create's: checked here, after the run, since the summary's
        # size is known only now (a refused compaction keeps nothing).
        usage = await asyncio.to_thread(store.usage, owner)
        state.settings.store_quota.check(usage, stored_size(kept_record.metadata, kept_record.extra,
                                                            kept_record.output_items))
        await asyncio.to_thread(store.put, kept_record)
    headers = {**response_headers(prepared), **({TRUNCATED_HEADER: str(dropped)} if dropped else {})}
    return JSONResponse(compaction_object(result["id"], result["created_at"], output, result["usage"]),
                        headers=headers)


@router.websocket("/v1/responses")
async def refuse_websocket(websocket: WebSocket) -> None:
    """The Responses API's WebSocket mode is not offered: the handshake is answered with a 400
    that says to stream over SSE (a server that cannot send that body closes it: 403)."""
    err = InvalidRequestError("WebSocket mode is not supported: this server streams Responses over "
                              "server-sent events; POST /v1/responses with \"stream\": true",
                              code="unsupported_transport")
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(JSONResponse(error_json(err, websocket.url.path),
                                                          status_code=err.status))
    else:
        await websocket.close(code=1008, reason=err.message[:120])


async def _stored(request: Request, response_id: str) -> Any:
    store = store_of(request)
    if store is None:
        raise unknown_response(response_id)
    return store, tenant_of(request).owner


@get_route("/v1/responses/{response_id}", response_model=None, responses=_ERRORS)
async def retrieve_response(response_id: str, request: Request, stream: bool = False) -> dict[str, Any]:
    """A stored response object (404 unknown, deleted or another tenant's)."""
    if stream:
        raise InvalidRequestError("stream: true is not supported here: a stored response is "
                                  "returned whole", param="stream", code="unsupported_parameter")
    store, owner = await _stored(request, response_id)
    try:
        stored = await asyncio.to_thread(store.get, owner, response_id)
    except NotFoundError:
        raise unknown_response(response_id) from None
    return response_of(stored)


@router.delete("/v1/responses/{response_id}", response_model=None, responses=_ERRORS)
async def delete_response(response_id: str, request: Request) -> dict[str, Any]:
    """Remove a stored response for good."""
    store, owner = await _stored(request, response_id)
    try:
        await asyncio.to_thread(store.delete, owner, response_id)
    except NotFoundError:
        raise unknown_response(response_id) from None
    return {"id": response_id, "object": "response", "deleted": True}


@get_route("/v1/responses/{response_id}/input_items", response_model=None, responses=_ERRORS)
async def list_input_items(response_id: str, request: Request, after: str | None = None,
                           limit: str = "20", order: str = "desc") -> dict[str, Any]:
    """A page of the stored response's input items (OpenAI's list object); ``limit`` 1-100,
    ``order`` asc / desc, ``after`` an item id (400s name the query parameter)."""
    store, owner = await _stored(request, response_id)
    try:
        count = int(limit)
    except ValueError:
        raise InvalidRequestError(f"limit must be an integer from 1 to 100, not {limit!r}",
                                  param="limit") from None
    try:
        page = await asyncio.to_thread(store.input_items, owner, response_id, after=after, limit=count,
                                       order=order)  # type: ignore[arg-type]  # checked by the store
    except NotFoundError as err:
        if err.param is None:
            raise unknown_response(response_id) from None
        raise
    return page.to_dict()


@router.post("/v1/responses/{response_id}/cancel", response_model=None, responses=_ERRORS)
async def cancel_response(response_id: str, request: Request) -> dict[str, Any]:
    """Cancel a running response, as the chat cancel does: the run ends at its next step with
    ``status: "cancelled"``.  404 for a response not running (unknown, finished, another
    tenant's)."""
    owner = tenant_of(request).owner
    entry = running(request).get((owner, response_id))
    if entry is None:
        raise NotFoundError(f"no running response {response_id!r}: it is unknown, has finished, "
                            "or belongs to another key")
    request_id, stream = entry
    err = request.app.state.afm.registry.cancel(owner, request_id)
    if err is not None:
        raise NotFoundError(f"no running response {response_id!r}: it has just finished")
    return stream.response("cancelled", output=list(stream.output))
