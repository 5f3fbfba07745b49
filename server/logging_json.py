"""Log formats: the default human-readable lines, or one JSON object per line (``--log-format json``).

In JSON every record is one object: ``ts`` (UTC, ISO 8601), ``level``, ``logger``, ``msg``,
and for the per-request line (logger ``afm_struct.requests``, see :mod:`server.observe`) the
request's fields: ``request_id``, ``endpoint``, ``status``, ``latency_s``, ``mode``, ``rung``,
``finish_reason``, token counts, ``ttft_s``, ``tenant``, ``client``.  uvicorn's own loggers
go through the same formatter (its access log is off in JSON: the request line replaces it).
"""

from __future__ import annotations

import copy
import json
import logging
from datetime import UTC, datetime
from typing import IO, Any

from .log_redaction import ContentRedaction

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
        if record.exc_text:  # already formatted (and redacted: log_redaction.py)
            out["exc"] = record.exc_text
        elif record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


def formatter(log_format: str) -> logging.Formatter:
    """The formatter for ``log_format`` (``text`` or ``json``)."""
    if log_format == "json":
        return JsonFormatter()
    if log_format == "text":
        return logging.Formatter(TEXT_FORMAT)
    raise ValueError(f"log format must be one of {LOG_FORMATS}")


def configure(log_format: str, level: str, *, log_content: bool = False,
              stream: IO[str] | None = None) -> logging.Handler:
    """Route the root logger to ``stream`` (stderr) in ``log_format``, replacing earlier
    handlers; every record goes through the content redaction unless ``log_content``
    (log_redaction.py).  Returns the handler."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter(log_format))
    if not log_content:
        handler.addFilter(ContentRedaction())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    return handler


def uvicorn_log_config(log_format: str, log_content: bool = False) -> dict[str, Any]:
    """uvicorn's ``log_config``: its own default for text (its handlers through the content
    redaction unless ``log_content``); for JSON its loggers propagate to the root's JSON
    handler, the access log silenced."""
    if log_format == "text":
        from uvicorn.config import LOGGING_CONFIG

        if log_content:
            return LOGGING_CONFIG
        config = copy.deepcopy(LOGGING_CONFIG)
        config.setdefault("filters", {})["redact"] = {"()": ContentRedaction}
        for handler in config.get("handlers", {}).values():
            handler["filters"] = [*handler.get("filters", []), "redact"]
        return config
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "loggers": {
            "uvicorn": {"handlers": [], "propagate": True},
            "uvicorn.error": {"handlers": [], "propagate": True},
            "uvicorn.access": {"handlers": [], "propagate": False, "level": "WARNING"},
        },
    }
