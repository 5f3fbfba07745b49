"""Real processes over real HTTP: scripted ``afm-struct serve`` replicas behind a real HAProxy.

Skipped (with the reason) where HAProxy is not installed; ``make setup`` installs it on Debian.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from afm_struct.cli.cluster_ports import free_port
from afm_struct.cli.cluster_supervisor import Cluster
from server.tenants import ApiKey

if shutil.which("haproxy") is None:
    pytest.skip("haproxy is not installed (make setup installs it on Debian; brew install haproxy "
                "on macOS)", allow_module_level=True)

KEY = "cluster-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
# A second tenant, named in the key list as a key file would name it (tests/cluster/test_tenancy.py).
KEY_B = "cluster-test-key-b"
AUTH_B = {"Authorization": f"Bearer {KEY_B}"}
TOKENS_PER_S = 50
# Per replica: 8 generate together, 12 wait; 3 replicas hold 60 requests.
MAX_ACTIVE, MAX_QUEUE = 8, 12
USER = [{"role": "user", "content": "count"}]


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three scripted replicas behind HAProxy, with two tenants' API keys (one named),
    supervised (restarts).  Its run directory is pytest's: a test kills a replica, and the
    cluster keeps its directory then."""
    c = Cluster(3, free_port(), ["--model", f"scripted:{TOKENS_PER_S}", "--log-level", "warning",
                                 "--max-active", str(MAX_ACTIVE), "--max-queue", str(MAX_QUEUE)],
                api_keys=(KEY, ApiKey(KEY_B, name="tenant-b")), log=lambda _line: None,
                run_dir=tmp_path_factory.mktemp("cluster"))
    c.start()
    c.supervise_in_background()
    yield c
    c.stop()


@dataclass
class StreamResult:
    """What one client saw of one streamed request."""

    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    payloads: list[str] = field(default_factory=list)
    body: str = ""  # non-200 responses
    error: BaseException | None = None  # the transport broke mid-stream
    first_chunk_s: float | None = None
    arrivals: list[float] = field(default_factory=list)
    ended_at: float = 0.0  # time.perf_counter() when the stream ended (either way)

    @property
    def complete(self) -> bool:
        """Ended with [DONE] and no transport error."""
        return self.error is None and bool(self.payloads) and self.payloads[-1] == "[DONE]"

    @property
    def chunks(self) -> list[dict[str, Any]]:
        """The JSON events before [DONE]."""
        return [json.loads(p) for p in self.payloads if p != "[DONE]"]

    @property
    def content(self) -> str:
        return "".join(c["choices"][0]["delta"].get("content") or "" for c in self.chunks if c.get("choices"))

    @property
    def finish_reason(self) -> str | None:
        reasons = [c["choices"][0]["finish_reason"] for c in self.chunks if c.get("choices")]
        return next((r for r in reversed(reasons) if r), None)

    @property
    def replica(self) -> str | None:
        return self.headers.get("x-afm-replica")


async def stream(client: httpx.AsyncClient, url: str, max_tokens: int, *,
                 headers: dict[str, str] | None = None,
                 on_first: Callable[[StreamResult], Awaitable[None]] | None = None) -> StreamResult:
    """POST a streaming completion; record status, headers, payloads and timings."""
    result = StreamResult()
    started = time.perf_counter()
    try:
        async with client.stream("POST", f"{url}/v1/chat/completions",
                                 json={"messages": USER, "stream": True, "max_tokens": max_tokens},
                                 headers={**AUTH, **(headers or {})}) as response:
            result.status, result.headers = response.status_code, dict(response.headers)
            if response.status_code != 200:
                result.body = (await response.aread()).decode()
                return result
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                now = time.perf_counter() - started
                result.arrivals.append(now)
                result.payloads.append(line[len("data: "):])
                if result.first_chunk_s is None:
                    result.first_chunk_s = now
                    if on_first is not None:
                        await on_first(result)
    except httpx.HTTPError as exc:
        result.error = exc
    result.ended_at = time.perf_counter()
    return result


def run(coro: Awaitable[Any]) -> Any:
    """Run a coroutine to completion (the tests are synchronous)."""
    return asyncio.run(coro)  # type: ignore[arg-type]


def async_client() -> httpx.AsyncClient:
    """A client with room for every concurrent stream of a test."""
    return httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=300,
                                                             max_keepalive_connections=300))


def wait_for(predicate: Callable[[], bool], timeout_s: float, poll_s: float = 0.05) -> float | None:
    """Seconds until ``predicate`` held, or None on timeout."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if predicate():
            return time.monotonic() - started
        time.sleep(poll_s)
    return None
