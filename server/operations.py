"""What an operator needs around the API: metrics, the request log and the drain state.

:func:`install` adds them to an app: ``/metrics``, :class:`~server.observe.ObserveMiddleware`
(outside the API-key check and the body limit, so 401s, 413s and drain 503s are counted and
logged; inside the request IDs, which it reports) and :class:`~server.drain.DrainMiddleware`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fastapi import FastAPI
from starlette.routing import BaseRoute

from .drain import DrainMiddleware, DrainState
from .metrics import ServerMetrics, scheduler_load
from .metrics import router as metrics_router
from .observe import ObserveMiddleware
from .settings import ServerSettings


def install(app: FastAPI, settings: ServerSettings, api_routes: Sequence[BaseRoute]) -> Callable[[], None]:
    """Set ``app.state.metrics`` / ``app.state.drain`` and the ``/metrics`` route; return the
    function that adds the two middlewares (called where they belong in the stack).
    ``api_routes``: every protocol's routes, to label requests refused before routing."""
    app.state.drain = DrainState()
    app.state.metrics = ServerMetrics(lambda: scheduler_load(app.state))
    app.include_router(metrics_router)

    def add_middleware() -> None:
        app.add_middleware(DrainMiddleware, drain=app.state.drain, retry_after_s=settings.retry_after_s)
        app.add_middleware(ObserveMiddleware, metrics=app.state.metrics, log_content=settings.log_content,
                           routes=[*api_routes, *metrics_router.routes])

    return add_middleware
