"""``create_app``: the FastAPI application over one loaded model.

The lifespan builds the generator and starts the scheduler thread (the only thread that touches
the model) and stops it on shutdown; handlers reach them through ``app.state.afm``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from afm_struct import __version__
from afm_struct.decoding.generator import Generator
from afm_struct.decoding.scheduler import Scheduler, SchedulerLimits
from afm_struct.models.loader import LoadedModel
from afm_struct.store import ResponseStore

from .auth import ApiKeyMiddleware
from .batches.routes import router as batches_router
from .batches.runner import BatchRunner
from .cancel import InflightRegistry
from .compile_route import router as compile_router
from .completions_api.route import router as completions_router
from .errors import install_error_handlers
from .messages.routes import router as messages_router
from .middleware import BodyLimitMiddleware, RequestIdMiddleware
from .ollama.route import router as ollama_router
from .operations import install as install_operations
from .playground_page import router as playground_router
from .responses.routes import router as responses_router
from .routes import router
from .settings import ServerSettings
from .state import ServerState
from .structured import Compile, default_compiler

log = logging.getLogger("afm_struct.server")


def _openapi_without_422(app: FastAPI) -> dict[str, Any]:
    """FastAPI documents a 422 on every body route; this server answers 400 with the envelope."""
    if app.openapi_schema is None:
        from fastapi.openapi.utils import get_openapi

        schema = get_openapi(title=app.title, version=app.version, description=app.description,
                             routes=app.routes)
        for path in schema.get("paths", {}).values():
            for operation in path.values():
                operation.get("responses", {}).pop("422", None)
        app.openapi_schema = schema
    return app.openapi_schema


def create_app(loaded: LoadedModel, settings: ServerSettings | None = None, *,
               compile_fn: Compile | None = None, response_store: ResponseStore | None = None) -> FastAPI:
    """The app serving ``loaded``; ``compile_fn`` replaces the default grammar compiler (CLI
    options, tests).  ``response_store`` (None: responses are not stored) is the app's from
    then on, in ``app.state.response_store``, and closed at shutdown."""
    settings = settings or ServerSettings()
    if loaded.info.aliases and not settings.model_short_names:
        settings = dataclasses.replace(settings, model_short_names=loaded.info.aliases)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from afm_struct.models.blas import blas_in_use

        scheduler = Scheduler(Generator.from_loaded(loaded),
                              SchedulerLimits(max_active=settings.max_active, max_queue=settings.max_queue,
                                              retry_after_s=settings.retry_after_s,
                                              join_wait_ms=settings.join_wait_ms))
        scheduler.start()
        # Prompts are checked against the tokenizer's length bound: computed now, not by the
        # first request (a fraction of a second on a large vocabulary).
        await asyncio.to_thread(getattr, loaded.tokenizer, "token_bound", None)
        app.state.afm = ServerState(
            loaded=loaded, settings=settings, scheduler=scheduler,
            registry=InflightRegistry(settings.recent_ids),
            blas=blas_in_use(), compile_fn=compile_fn or default_compiler())
        app.state.started_at = time.time()
        # Batches left in progress by a stopped (or killed) server resume now.
        runner = app.state.batch_runner = (
            BatchRunner(app.state.afm, response_store, draining=lambda: app.state.drain.draining,
                        metrics=app.state.metrics)
            if response_store is not None else None)
        if runner is not None:
            runner.start()
        try:
            yield
        finally:
            if runner is not None:
                await runner.stop()
            scheduler.stop()
            if response_store is not None:
                response_store.close()

    app = FastAPI(title="afm-struct", version=__version__, lifespan=lifespan,
                  description="OpenAI-compatible chat completions with grammar-constrained output.")
    app.state.response_store = response_store
    install_error_handlers(app)
    app.include_router(router)
    app.include_router(responses_router)
    app.include_router(completions_router)
    app.include_router(ollama_router)
    app.include_router(messages_router)
    app.include_router(batches_router)
    app.include_router(compile_router)
    app.include_router(playground_router)
    add_operations_middleware = install_operations(
        app, settings, [*router.routes, *responses_router.routes, *completions_router.routes,
                        *ollama_router.routes, *messages_router.routes, *batches_router.routes,
                        *compile_router.routes])
    app.openapi = lambda: _openapi_without_422(app)  # type: ignore[method-assign]
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes,
                       timeout_s=settings.body_timeout_s)
    # Outside the body limit (a caller without a key is refused before its body is read), inside
    # the request IDs (a 401 still carries them).
    app.add_middleware(ApiKeyMiddleware, keys=settings.keys)
    add_operations_middleware()  # metrics, request log, drain: outside the key check
    app.add_middleware(RequestIdMiddleware)  # added last: outermost, so every response has the IDs
    return app
