"""Log formats: the default human-readable lines, or one JSON object per line (``--log-format json``).

In JSON every record is one object: ``ts`` (UTC, ISO 8601), ``level``, ``logger``, ``msg``,
and for the per-request line (logger ``afm_struct.requests``, see :mod:`server.observe`) the
request's fields: ``request_id``, ``endpoint``, ``status``, ``latency_s``, ``mode``, ``rung``,
``finish_reason``, token counts, ``ttft_s``, ``tenant``, ``client``.  uvicorn's own loggers
go through the same formatter (its access log is off in JSON: the request line replaces it).
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as a single-line JSON object."""
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "afm", None)
        if isinstance(fields, dict):
            out.update(fields)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


def formatter(log_format: str) -> logging.Formatter:
    """The formatter for ``log_format`` (``text`` or ``json``)."""
    if log_format == "json":
        return JsonFormatter()
    if log_format == "text":
        return logging.Formatter(TEXT_FORMAT)
    raise ValueError(f"log format must be one of {LOG_FORMATS}")


def configure(log_format: str, level: str) -> None:
    """Route the root logger to stderr in ``log_format`` (replacing earlier handlers)."""
    handler = logging.StreamHandler()
    handler.setFormatter(formatter(log_format))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


def uvicorn_log_config(log_format: str) -> dict[str, Any]:
    """uvicorn's ``log_config``: its own default for text; for JSON its loggers propagate to
    the root's JSON handler, the access log silenced."""
    if log_format == "text":
        from uvicorn.config import LOGGING_CONFIG

        return LOGGING_CONFIG
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "loggers": {
            "uvicorn": {"handlers": [], "propagate": True},
            "uvicorn.error": {"handlers": [], "propagate": True},
            "uvicorn.access": {"handlers": [], "propagate": False, "level": "WARNING"},
        },
    }
