"""One batch line, run through the same path as a live request to its endpoint.

The body is validated by the endpoint's own pydantic model, planned by its adapter, prepared
and admitted by the core (:mod:`server.admission`) and collected by its body encoder, exactly
as the HTTP handler does: no HTTP call to itself.  Whatever the endpoint would answer, a 200
body or an error envelope, is the line's answer.  A full engine (:class:`OverloadedError`) is
raised instead: the runner gives the line back and tries it later.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from afm_struct.errors import AfmError, GenerationError, InvalidRequestError, NotFoundError, OverloadedError
from afm_struct.store import ResponseStore

from ..admission import Prepared, admit, prepare
from ..chat.adapter import plan_chat
from ..chat.encoder import ChatCompletion
from ..completions_api.adapter import plan_completion
from ..completions_api.encoder import TextCompletion
from ..completions_api.schemas import CompletionRequest
from ..errors import validation_error
from ..responses.adapter import plan_responses
from ..responses.bounds import check_request_fields
from ..responses.encoder import ResponsesBody, ResponsesStream
from ..responses.items import input_turns
from ..responses.schemas import ResponsesRequest
from ..responses.storage import unknown_response
from ..responses.truncation import prepare_fitting
from ..run import BodyEncoder, collect
from ..schemas import ChatCompletionRequest
from ..sse import error_json
from ..state import ServerState

log = logging.getLogger("afm_struct.server")


@dataclass(frozen=True)
class LineAnswer:
    """What the endpoint answered: its status and body, and whether a strict schema or tool
    grammar ran best-effort (live, the ``X-Grammar-Constraints: downgraded`` header)."""

    status: int
    body: dict[str, Any]
    downgraded: bool = False
    # What the request log reads of a run, as of a live request's state (``afm_prepared``,
    # ``afm_run``: server/observe.py); empty for a line refused before it was prepared.
    handled: dict[str, Any] = field(default_factory=dict)


async def answer_line(state: ServerState, store: ResponseStore | None, owner: str, url: str,
                      body: dict[str, Any], request_id: str) -> LineAnswer:
    """What the endpoint ``url`` answers ``body`` with, run for ``owner``.  Raises
    :class:`OverloadedError` when the engine is full (nothing ran)."""
    handled: dict[str, Any] = {}
    try:
        handler = _HANDLERS.get(url)
        if handler is None:
            raise NotFoundError(f"no such route: POST {url}; a batch line's url is one of "
                                + ", ".join(_HANDLERS), param="url")
        result, prepared = await handler(state, store, owner, body, request_id, handled)
        return LineAnswer(200, result, prepared.downgraded, handled)
    except OverloadedError:
        raise
    except AfmError as err:
        return LineAnswer(err.status, error_json(err, url), handled=handled)
    except Exception as exc:  # a server bug: the line fails with an opaque error, the batch goes on
        log.error("batch line %s failed", request_id, exc_info=exc)
        err = GenerationError("internal server error; the server log has the details under this "
                              "request's ID", code="internal_error")
        return LineAnswer(err.status, error_json(err, url), handled=handled)


def _validated(model: type[BaseModel], body: dict[str, Any]) -> Any:
    """``body`` as the endpoint's request model (the endpoint's own 400 otherwise); a batch
    line is answered whole, so ``stream`` is refused."""
    try:
        request = model.model_validate(body)
    except ValidationError as exc:
        raise validation_error(exc.errors(), body) from None
    if getattr(request, "stream", False):
        raise InvalidRequestError("stream: a batch line is answered whole; leave stream out or false",
                                  param="stream", code="invalid_value")
    return request


async def _run(state: ServerState, prepared: Prepared, owner: str, encoder: BodyEncoder,
               handled: dict[str, Any]) -> tuple[dict[str, Any], Prepared]:
    # Background work: live requests start and prefill first (afm_struct/decoding/scheduler.py).
    prepared.generation.background = True
    handled["afm_prepared"] = prepared
    run = handled["afm_run"] = admit(state, prepared, owner=owner)
    try:
        return await collect(run, encoder), prepared
    finally:
        run.close()


async def _chat(state: ServerState, _store: ResponseStore | None, owner: str, body: dict[str, Any],
                request_id: str, handled: dict[str, Any]) -> tuple[dict[str, Any], Prepared]:
    request = _validated(ChatCompletionRequest, body)
    plan = await plan_chat(state, request, request_id=request_id, profile_key=None)
    prepared = await prepare(state, plan)
    encoder = ChatCompletion(prepared.ident, logprobs=plan.logprobs is not None)
    return await _run(state, prepared, owner, encoder, handled)


async def _completion(state: ServerState, _store: ResponseStore | None, owner: str, body: dict[str, Any],
                      request_id: str, handled: dict[str, Any]) -> tuple[dict[str, Any], Prepared]:
    request = _validated(CompletionRequest, body)
    plan = await plan_completion(state, request, request_id=request_id, profile_key=None)
    prepared = await prepare(state, plan)
    echo = plan.conversation.prompt if request.echo else None
    return await _run(state, prepared, owner,
                      TextCompletion(prepared.ident, logprobs=plan.logprobs is not None, echo=echo), handled)


async def _response(state: ServerState, store: ResponseStore | None, owner: str, body: dict[str, Any],
                    request_id: str, handled: dict[str, Any]) -> tuple[dict[str, Any], Prepared]:
    # As the route does (server/responses/routes.py), but the response is not kept: a batch's
    # answers live in its output file.
    request = _validated(ResponsesRequest, body)
    check_request_fields(request)
    history = None
    if request.previous_response_id is not None:
        if store is None:
            raise unknown_response(request.previous_response_id, "previous_response_id")
        items = await asyncio.to_thread(store.conversation, owner, request.previous_response_id)
        history = input_turns(None, items)
    plan, echo = await plan_responses(state, request, request_id=request_id, profile_key=None,
                                      history=history, store=False)
    prepared, _ = await prepare_fitting(state, plan, auto=request.truncation == "auto")
    stream = ResponsesStream(prepared.ident, echo.fields, custom_tools=echo.custom_tools,
                             new_id=state.ids.new_id)
    return await _run(state, prepared, owner, ResponsesBody(stream), handled)


Handler = Callable[[ServerState, "ResponseStore | None", str, dict[str, Any], str, dict[str, Any]],
                   Awaitable[tuple[dict[str, Any], Prepared]]]
_HANDLERS: dict[str, Handler] = {"/v1/chat/completions": _chat, "/v1/responses": _response,
                                 "/v1/completions": _completion}
