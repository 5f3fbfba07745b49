"""A light load generator for ``bench serve --client light``: raw httpx streaming, one
``json.loads`` per SSE data line, no per-chunk models.

The contract-following client (:mod:`afm_struct.client`) assembles every chunk into typed
events; at 32 streams on the server's own cores it cost ~0.3 ms of CPU per token, as much as
the server, so a load test measured the client as much as the server (issue 40).  This one reads
what ``bench serve`` needs (content, finish_reason, usage, an in-band error, the constraint
header, the first delta's time) and nothing else.  Tool calls are not assembled: tool requests
keep the full client.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from afm_struct.client import _http_error, build_request


@dataclass
class LightResult:
    """What ``bench serve`` validates and counts of one streamed chat completion."""

    content: str = ""
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    tool_calls: list[Any] = field(default_factory=list)
    deltas: int = 0
    first_delta_s: float | None = None  # since the request was sent


async def light_stream(http: httpx.AsyncClient, messages: list[dict[str, Any]], *,
                       request_id: str | None = None, **params: Any) -> LightResult:
    """Send one streamed chat completion and read it whole (raises ``AfmHTTPError`` on a
    non-2xx answer, like the full client)."""
    body, headers = build_request(messages, stream=True, request_id=request_id, **params)
    start = time.perf_counter()
    result = LightResult()
    parts: list[str] = []
    async with http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response:
        if response.status_code >= 400:
            raise _http_error(response, await response.aread())
        result.headers = dict(response.headers)
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if "error" in chunk:
                result.error = chunk["error"]
                continue
            if chunk.get("usage"):
                result.usage = chunk["usage"]
            for choice in chunk.get("choices") or ():
                text = (choice.get("delta") or {}).get("content")
                if text:
                    if result.first_delta_s is None:
                        result.first_delta_s = time.perf_counter() - start
                    result.deltas += 1
                    parts.append(text)
                if choice.get("finish_reason"):
                    result.finish_reason = choice["finish_reason"]
    result.content = "".join(parts)
    return result
