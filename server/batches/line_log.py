"""A batch line in the request log and the metrics: one record per line, as for a live request.

A line is not an HTTP request, so it is not counted in ``afm_requests`` or the latency and
TTFT histograms (those describe what clients wait for); it is counted in the batch counters
(``afm_batch_lines_started``, ``afm_batch_lines_ended`` by endpoint and result) and in the
token and finish-reason counters, and logged on ``afm_struct.requests`` with its batch id and
``custom_id`` (method ``BATCH``, the line's ``url`` as the endpoint, no client).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ..metrics import ServerMetrics
from ..observe import fill_from_handler
from ..request_record import RequestRecord
from ..tenants import owner_label

log = logging.getLogger("afm_struct.requests")


def line_record(*, request_id: str, url: str, owner: str, status: int, started: float,
                handled: dict[str, Any], batch_id: str, custom_id: str | None,
                error_type: str | None, log_content: bool = False, tokenizer: Any = None) -> RequestRecord:
    """The record of one answered line: ``handled`` is what its run left (``afm_prepared``,
    ``afm_run``), ``started`` its ``perf_counter`` start."""
    rec = RequestRecord(request_id=request_id, method="BATCH", endpoint=url, client=None,
                        tenant=owner_label(owner), status=status, batch_id=batch_id,
                        custom_id=custom_id, error_type=error_type)
    rec.latency_s = time.perf_counter() - started
    fill_from_handler(rec, handled, started, with_content=log_content, tokenizer=tokenizer)
    return rec


def report_line(metrics: ServerMetrics | None, rec: RequestRecord, endpoint: str) -> None:
    """Count and log one answered line (never fails the batch: a fault here is logged)."""
    try:
        if metrics is not None:
            metrics.observe_batch_line(rec, endpoint)
        log.info(rec.human(), extra={"afm": rec.log_fields()})
    except Exception:
        log.exception("could not record batch line %s", rec.request_id)
