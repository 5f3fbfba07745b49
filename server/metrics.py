"""Prometheus metrics: ``GET /metrics`` in the text exposition format (``prometheus-client``).

Each app has its own :class:`CollectorRegistry` (tests run many apps in one process; the
default global registry would refuse the second).  Counters and histograms are fed once per
request by :mod:`server.observe` from a :class:`~server.request_record.RequestRecord`; the load gauges
(queue depth, active rows, capacity, in flight, draining) are read from the scheduler when
Prometheus scrapes, so they are never stale; the standard ``process_*`` metrics (CPU seconds,
memory, file descriptors) are the process's own.

Labels stay bounded: ``endpoint`` is the route template (``other`` for unknown paths),
``mode`` one of :data:`MODES`, ``tenant`` the tenant's label (never the key),
error ``type`` the envelope's type.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar

from fastapi import APIRouter, Request, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from .request_record import RequestRecord

# Constraint modes a request is counted under (server/observe.py constraint_mode); "none" for
# requests that are not generations.
MODES = ("text", "json_object", "json_schema", "regex", "lark", "structural_tag", "tools", "none")
# Seconds; LLM requests run from milliseconds (scripted) to minutes (long generations).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
PER_TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56)
COMPILE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
PREFIX = "afm"


class ServerMetrics:
    """The instruments of one app, and :meth:`observe` to feed them one finished request."""

    def __init__(self, load: Callable[[], dict[str, float]]) -> None:
        self.registry = r = CollectorRegistry()

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(f"{PREFIX}_{name}", doc, labels, registry=r)

        def histogram(name: str, doc: str, labels: tuple[str, ...], buckets: tuple[float, ...]) -> Histogram:
            return Histogram(f"{PREFIX}_{name}", doc, labels, buckets=buckets, registry=r)

        self.requests = counter("requests", "HTTP requests by endpoint, status, constraint mode and tenant",
                                ("endpoint", "status", "mode", "tenant"))
        self.latency = histogram("request_duration_seconds", "End-to-end request time (to the last byte)",
                                 ("endpoint",), LATENCY_BUCKETS)
        self.ttft = histogram("time_to_first_token_seconds",
                              "Arrival to the first generated token (prepare, queue, prefill, first step)",
                              ("mode",), LATENCY_BUCKETS)
        self.per_token = histogram("time_per_output_token_seconds",
                                   "Mean time between output tokens after the first, per request",
                                   ("mode",), PER_TOKEN_BUCKETS)
        self.prompt_tokens = counter("prompt_tokens", "Prompt tokens of admitted requests", ("tenant",))
        self.completion_tokens = counter("completion_tokens", "Completion tokens generated (forced included)",
                                         ("tenant",))
        self.forced_tokens = counter("forced_tokens", "Completion tokens the grammar forced (fast-forwarded, "
                                     "not sampled); their share is forced / completion")
        self.cached_tokens = counter("cached_prompt_tokens", "Prompt tokens served from the prefix cache")
        self.reasoning_tokens = counter("reasoning_tokens", "Completion tokens of thinking blocks (tags "
                                        "included), as the generator's turn read them", ("tenant",))
        self.compile_time = histogram("grammar_compile_seconds", "Constraint compile time (cache misses)",
                                      ("kind",), COMPILE_BUCKETS)
        self.compile_cache = counter("grammar_compile_cache", "Constraint compile-cache lookups", ("result",))
        self.downgrades = counter("downgrades", "Strict constraints served best-effort, by ladder rung",
                                  ("rung",))
        self.finishes = counter("finish_reasons", "Generations by finish_reason", ("reason",))
        self.cancels = counter("cancels", "Generations cancelled by request ID (drain included)")
        self.disconnects = counter("client_disconnects", "Clients gone before their response ended")
        self.unavailable = counter("unavailable_responses", "503 answers (busy, draining, engine down)",
                                   ("type",))
        self.errors = counter("errors", "Error envelopes sent (HTTP status or in-band stream error)",
                              ("type",))
        # Batch jobs (server/batches/): lines by the batch's endpoint, batches by status.
        self.batch_lines_started = counter("batch_lines_started", "Batch lines this replica started, by "
                                           "batch endpoint", ("endpoint",))
        self.batch_lines_ended = counter("batch_lines_ended", "Batch lines this replica answered, by batch "
                                         "endpoint and result (completed: a 200; failed: in the error file)",
                                         ("endpoint", "result"))
        self.batches_ended = counter("batches_ended", "Batches this replica ended, by final status "
                                     "(completed, failed, cancelled, expired)", ("status",))
        self.batches = Gauge(f"{PREFIX}_batches", "Batches not ended in the store, by status, as the "
                             "batch runner last saw them", ("status",), registry=r)
        r.register(LoadCollector(load))
        # process_cpu_seconds_total, resident memory, open fds (Linux /proc; nothing elsewhere):
        # `bench serve` reads the CPU seconds to report the server's cost per generated token.
        ProcessCollector(registry=r)

    def observe(self, rec: RequestRecord) -> None:
        """Count one finished request."""
        mode = rec.mode or "none"
        self.requests.labels(rec.endpoint, str(rec.status), mode, rec.tenant).inc()
        self.latency.labels(rec.endpoint).observe(rec.latency_s)
        if rec.status == 503:
            self.unavailable.labels(rec.error_type or "unavailable").inc()
        if rec.error_type is not None:
            self.errors.labels(rec.error_type).inc()
        if rec.disconnected:
            self.disconnects.inc()
        for kind, compile_s, cached in rec.compiles:
            self.compile_cache.labels("hit" if cached else "miss").inc()
            if not cached:
                self.compile_time.labels(kind).observe(compile_s)
        if rec.downgraded_rung is not None:
            self.downgrades.labels(rec.downgraded_rung).inc()
        if rec.finish_reason is None:
            return
        self.finishes.labels(rec.finish_reason).inc()
        if rec.cancelled_by_id:
            self.cancels.inc()
        self.prompt_tokens.labels(rec.tenant).inc(rec.prompt_tokens)
        self.completion_tokens.labels(rec.tenant).inc(rec.completion_tokens)
        self.forced_tokens.inc(rec.forced_tokens)
        self.cached_tokens.inc(rec.cached_tokens)
        self.reasoning_tokens.labels(rec.tenant).inc(rec.reasoning_tokens)
        if rec.ttft_s is not None:
            self.ttft.labels(mode).observe(rec.ttft_s)
            if rec.completion_tokens > 1:
                self.per_token.labels(mode).observe(
                    max(rec.latency_s - rec.ttft_s, 0.0) / (rec.completion_tokens - 1))

    def observe_batch_line(self, rec: RequestRecord, endpoint: str) -> None:
        """Count one answered batch line (``endpoint``: its batch's): its result, and its tokens
        and finish reason as a request's (not the HTTP counters and histograms)."""
        self.batch_lines_ended.labels(endpoint, "completed" if rec.status == 200 else "failed").inc()
        if rec.finish_reason is None:
            return
        self.finishes.labels(rec.finish_reason).inc()
        self.prompt_tokens.labels(rec.tenant).inc(rec.prompt_tokens)
        self.completion_tokens.labels(rec.tenant).inc(rec.completion_tokens)
        self.forced_tokens.inc(rec.forced_tokens)
        self.cached_tokens.inc(rec.cached_tokens)
        self.reasoning_tokens.labels(rec.tenant).inc(rec.reasoning_tokens)

    def render(self) -> bytes:
        """The exposition text of every metric."""
        return generate_latest(self.registry)


class LoadCollector(Collector):
    """Gauges read at scrape time from ``load()`` (name suffix → value)."""

    HELP: ClassVar[dict[str, str]] = {
        "queue_depth": "Requests admitted and waiting for a row",
        "active_rows": "Sequences being generated now",
        "capacity": "Requests the server admits at once (rows + queue); beyond it 503",
        "max_active_rows": "Rows generated together at most (--max-active)",
        "requests_in_flight": "Requests registered from admission to their last event",
        "draining": "1 while the server drains after SIGTERM",
    }

    def __init__(self, load: Callable[[], dict[str, float]]) -> None:
        self._load = load

    def collect(self) -> Iterator[Metric]:
        """One gauge family per value of ``load()``."""
        for name, value in self._load().items():
            yield GaugeMetricFamily(f"{PREFIX}_{name}", self.HELP.get(name, name), value=value)

    def describe(self) -> Iterator[Metric]:
        """Nothing up front: the values need a running scheduler."""
        return iter(())


def scheduler_load(app_state: Any) -> dict[str, float]:
    """The load gauges of the app whose ``app.state`` is ``app_state`` (empty before start-up)."""
    state = getattr(app_state, "afm", None)
    drain = getattr(app_state, "drain", None)
    out: dict[str, float] = {"draining": float(bool(drain and drain.draining))}
    if state is None:
        return out
    scheduler = state.scheduler
    pending, capacity = scheduler.load
    active = scheduler.active_rows
    out.update(queue_depth=max(pending - active, 0), active_rows=active, capacity=capacity,
               max_active_rows=scheduler.limits.max_active, requests_in_flight=len(state.registry))
    return out


router = APIRouter()


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    """Prometheus' text format (behind the API key when keys are set, like every route but
    /health: give the scrape job ``authorization: {credentials: KEY}``)."""
    registry: ServerMetrics = request.app.state.metrics
    return Response(registry.render(), media_type=CONTENT_TYPE_LATEST)
