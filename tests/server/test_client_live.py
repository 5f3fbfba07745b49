"""afm_struct.client (sync and async) against a live scripted server."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from afm_struct.client import AfmHTTPError, AfmStreamError, AsyncClient, Client
from afm_struct.testing import Script

from .conftest import USER, wait_until


def test_sync_client_stream_and_non_stream(serve) -> None:
    live = serve("<think>hmm</think>Hello there!", reasoning="think")
    with Client(live.url) as client:
        r = client.chat(USER, request_id="c-1", profile="true", stream_options={"include_usage": True})
        assert (r.content, r.reasoning_content, r.finish_reason) == ("Hello there!", "hmm", "stop")
        assert r.request_id == "c-1" and r.usage["completion_tokens"] > 0
        assert r.profile_key == "afm_profile" and r.profile["decode_tok_s"] > 0
        events = [e.kind for e in client.stream(USER)]
        assert events[0] == "delta" and events[-2:] == ["finish", "done"]
        n = client.chat(USER, stream=False)
        assert (n.content, n.reasoning_content, n.finish_reason) == ("Hello there!", "hmm", "stop")


def test_http_errors_are_typed(serve) -> None:
    live = serve(Script("tick " * 200, delay_s=0.02), max_active=1, max_queue=0)
    with Client(live.url) as client:
        with pytest.raises(AfmHTTPError) as exc:
            client.chat(USER, model="nope")
        assert exc.value.status == 404 and exc.value.param == "model"
        with pytest.raises(AfmHTTPError) as exc:
            client.chat(USER, stream=False, n=2)
        assert exc.value.status == 400 and exc.value.type == "invalid_request_error"
        out: dict = {}
        t = threading.Thread(target=lambda: out.setdefault("r", client.chat(USER, request_id="hold")))
        t.start()
        assert wait_until(lambda: "hold" in live.state.registry)
        with pytest.raises(AfmHTTPError) as exc:
            Client(live.url).chat(USER)
        assert exc.value.status == 503 and exc.value.retry_after == 1
        assert client.cancel("hold") is True
        t.join(10)
        assert out["r"].finish_reason == "cancelled"
        assert client.cancel("hold") is False


def test_stream_error_is_reported(serve) -> None:
    live = serve(Script("a b c d e f g", fail_at=2))
    with Client(live.url) as client:
        r = client.chat(USER)
        assert r.finish_reason == "error" and r.error["code"] == "generation_failed"
        with pytest.raises(AfmStreamError):
            r.raise_for_error()


def test_async_client_concurrent_streams(serve) -> None:
    live = serve(Script("one two three", delay_s=0.005))

    async def main() -> list:
        async with AsyncClient(live.url) as client:
            results = await asyncio.gather(*(client.chat(USER, request_id=f"a-{i}") for i in range(4)))
            plain = await client.chat(USER, stream=False)
            cancelled = await client.cancel("a-0")
            return [*results, plain, cancelled]

    *results, plain, cancelled = asyncio.run(main())
    assert [r.content for r in results] == ["one two three"] * 4
    assert {r.request_id for r in results} == {f"a-{i}" for i in range(4)}
    assert plain.content == "one two three" and cancelled is False


def test_async_client_cancel_mid_stream(serve) -> None:
    live = serve(Script("w " * 300, delay_s=0.02))

    async def main():
        async with AsyncClient(live.url) as client:
            seen = 0
            async for event in client.stream(USER, request_id="ac"):
                if event.kind == "delta":
                    seen += 1
                    if seen == 3:
                        t0 = time.perf_counter()
                        assert await client.cancel("ac")
                if event.kind == "done":
                    return event.data, time.perf_counter() - t0

    result, after = asyncio.run(main())
    assert result.finish_reason == "cancelled" and after < 2
