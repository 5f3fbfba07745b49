"""Ollama's routes: ``/api/chat`` and ``/api/generate`` through the shared core (the adapter
makes the plan, :func:`server.routes.respond` runs it with the NDJSON encoder), and what its
clients ask to list and pick the model (``/api/tags``, ``/api/show``, ``/api/ps``,
``/api/version``).

Errors are Ollama's: ``{"error": "message"}`` with the HTTP status (the typed error's status),
which Ollama's clients raise as ``ResponseError``; :func:`server.errors.error_response` gives
every error under ``/api/`` that shape, here and in the middleware that answers first.
"""

from __future__ import annotations

import hashlib
import json
import time
from functools import partial
from typing import Any, TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError

from afm_struct.errors import AfmError, InvalidRequestError

from ..admission import prepare
from ..errors import body_parse_error, error_response, validation_error
from ..get_route import get_and_head
from ..routes import respond
from ..state import ServerState
from .adapter import ollama_model, plan_ollama_chat, plan_ollama_generate
from .encoder import NDJSON, OllamaBody, OllamaStream, created_at
from .schemas import OllamaChatRequest, OllamaGenerateRequest, OllamaShowRequest

router = APIRouter(include_in_schema=False)
Body = TypeVar("Body", bound=BaseModel)
# The Ollama API level these routes follow (clients compare it, not afm-struct's version).
OLLAMA_VERSION = "0.12.0"


async def read_body(request: Request, model: type[Body]) -> Body:
    """The request's JSON body as ``model`` (400s as :func:`server.errors.validation_error`)."""
    raw = await request.body()
    try:
        data = json.loads(raw or b"{}")
    except ValueError as exc:
        if "integer string conversion" in str(exc):  # an integer too long to read: name its field
            raise body_parse_error(exc, raw) from None
        # Where the JSON breaks, from the decoder's position (not its exception text).
        where = (f" at line {exc.lineno} column {exc.colno}"
                 if isinstance(exc, json.JSONDecodeError) else " (not UTF-8)")
        raise InvalidRequestError("the body is not valid JSON" + where, code="invalid_json") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc.errors(), data) from exc


def _state(request: Request) -> ServerState:
    return request.app.state.afm  # type: ignore[no-any-return]


@router.post("/api/chat")
async def ollama_chat(request: Request) -> Response:
    """Ollama's chat: NDJSON when ``stream`` (the default), one object otherwise."""
    state, started = _state(request), time.perf_counter()
    try:
        body = await read_body(request, OllamaChatRequest)
        plan = await plan_ollama_chat(state, body, request_id=request.state.request_id)
        return await _answer(request, state, plan, "chat", started)
    except AfmError as err:
        return error_response(err, request)


@router.post("/api/generate")
async def ollama_generate(request: Request) -> Response:
    """Ollama's generate; without a prompt, Ollama's "load" answer (the model is loaded)."""
    state, started = _state(request), time.perf_counter()
    try:
        body = await read_body(request, OllamaGenerateRequest)
        if not body.prompt:
            model = ollama_model(body.model, state.settings.model_names(state.loaded.info.id),
                                 state.settings.model_aliases)
            return JSONResponse({"model": model, "created_at": created_at(int(time.time())), "response": "",
                                 "done": True, "done_reason": "load"})
        plan = plan_ollama_generate(state, body, request_id=request.state.request_id)
        return await _answer(request, state, plan, "generate", started)
    except AfmError as err:
        return error_response(err, request)


async def _answer(request: Request, state: ServerState, plan: Any, kind: Any, started: float) -> Response:
    prepared = await prepare(state, plan, started=started)
    logprobs = plan.logprobs is not None
    return await respond(request, state, prepared, content_type=NDJSON,
                         stream=lambda: OllamaStream(prepared.ident, kind, logprobs=logprobs),
                         body=lambda: OllamaBody(prepared.ident, kind, logprobs=logprobs))


def _details(state: ServerState) -> dict[str, Any]:
    info = state.loaded.info
    return {"parent_model": "", "format": "gguf" if info.source == "gguf" else "safetensors",
            "family": "", "families": None, "parameter_size": "",
            "quantization_level": "Q" if info.weights == "quantized" else info.weights.upper()}


def _model_entry(state: ServerState, name: str, modified: float) -> dict[str, Any]:
    info = state.loaded.info
    return {"name": name, "model": name, "modified_at": created_at(int(modified)),
            "size": info.weight_bytes, "digest": hashlib.sha256(info.id.encode()).hexdigest(),
            "details": _details(state)}


get_route = partial(get_and_head, router)


@get_route("/api/tags")
async def ollama_tags(request: Request) -> dict[str, Any]:
    """The served model, under each name it answers to."""
    state = _state(request)
    started = request.app.state.started_at
    names = state.settings.model_names(state.loaded.info.id)
    return {"models": [_model_entry(state, n, started) for n in names]}


@get_route("/api/ps")
async def ollama_ps(request: Request) -> dict[str, Any]:
    """The running model (the one loaded; it stays loaded)."""
    state = _state(request)
    name = state.settings.model_names(state.loaded.info.id)[0]
    entry = _model_entry(state, name, request.app.state.started_at)
    return {"models": [{**entry, "expires_at": "2999-01-01T00:00:00Z", "size_vram": 0,
                        "context_length": state.loaded.info.context_length}]}


@router.post("/api/show")
async def ollama_show(request: Request) -> Response:
    """One model's details: its chat template, context length and capabilities."""
    state = _state(request)
    try:
        body = await read_body(request, OllamaShowRequest)
        requested = body.model or body.name
        if not requested:
            raise InvalidRequestError("model is required", param="model", code="missing_required_parameter")
        ollama_model(requested, state.settings.model_names(state.loaded.info.id),
                     state.settings.model_aliases)
    except AfmError as err:
        return error_response(err, request)
    info = state.loaded.info
    template = getattr(state.loaded.tokenizer.hf, "chat_template", None) or ""
    return JSONResponse({
        "modelfile": "", "parameters": "", "template": template if isinstance(template, str) else "",
        "details": _details(state), "modified_at": created_at(int(request.app.state.started_at)),
        "model_info": {"general.architecture": info.source, "general.name": info.id,
                       "general.context_length": info.context_length},
        "capabilities": ["completion", "tools"]})


@get_route("/api/version")
async def ollama_version() -> dict[str, str]:
    """The Ollama API level followed here."""
    return {"version": OLLAMA_VERSION}
