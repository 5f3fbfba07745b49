"""What the metrics and the request log keep of one HTTP request: the :class:`RequestRecord`.

Its own module so that :mod:`server.metrics` (which counts records) and :mod:`server.observe`
(which fills them) both import it and neither imports the other.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

# The tenant label of a request whose key was refused (no tenant: it never reached the app).
UNAUTHENTICATED = "unauthenticated"


@dataclass
class RequestRecord:
    """What the metrics and the log keep of one request (no prompt or output text unless
    ``content`` is filled, which only ``--log-content`` does)."""

    request_id: str
    method: str
    endpoint: str
    client: str | None
    tenant: str = UNAUTHENTICATED
    status: int = 0
    latency_s: float = 0.0
    model: str | None = None
    mode: str | None = None
    rung: str | None = None
    downgraded_rung: str | None = None
    stream: bool | None = None
    finish_reason: str | None = None
    cancelled_by_id: bool = False
    disconnected: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    forced_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    ttft_s: float | None = None
    error_type: str | None = None
    compiles: list[tuple[str, float, bool]] = field(default_factory=list)
    content: dict[str, str] | None = None
    # A batch line (not an HTTP request): its batch and custom_id (server/batches/line_log.py).
    batch_id: str | None = None
    custom_id: str | None = None

    def log_fields(self) -> dict[str, Any]:
        """The request log's fields (compile details stay in the metrics)."""
        out = asdict(self)
        out.pop("compiles")
        out.pop("downgraded_rung")
        for key in ("content", "batch_id", "custom_id"):
            if out[key] is None:
                out.pop(key)
        out["latency_s"] = round(self.latency_s, 6)
        if self.ttft_s is not None:
            out["ttft_s"] = round(self.ttft_s, 6)
        return out

    def human(self) -> str:
        """The default (text) log line."""
        parts = [f"{self.method} {self.endpoint} {self.status}", self.request_id,
                 f"tenant={self.tenant}", f"client={self.client or '-'}"]
        if self.batch_id is not None:
            parts.append(f"batch={self.batch_id} custom_id={json.dumps(self.custom_id)}")
        if self.mode is not None:
            parts.append(f"mode={self.mode}" + (f"/{self.rung}" if self.rung else ""))
        if self.finish_reason is not None:
            parts.append(f"finish={self.finish_reason}")
            parts.append(f"tokens={self.prompt_tokens}+{self.completion_tokens}")
        if self.ttft_s is not None:
            parts.append(f"ttft={self.ttft_s:.3f}s")
        parts.append(f"total={self.latency_s:.3f}s")
        if self.error_type:
            parts.append(f"error={self.error_type}")
        if self.disconnected:
            parts.append("client-disconnected")
        return " ".join(parts)
