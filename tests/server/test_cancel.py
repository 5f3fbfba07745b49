"""Cancellation by correlation ID, client disconnects, duplicate IDs (scripted model, real HTTP)."""

from __future__ import annotations

import json
import threading
import time

import httpx

from afm_struct.testing import Script

from .conftest import USER, decode, wait_until

LONG = " ".join(f"w{i}" for i in range(400))


def _cancel(url: str, rid: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions/{rid}/cancel")


def test_cancel_in_flight_stream(serve) -> None:
    live = serve(Script(LONG, delay_s=0.02))
    model = live.loaded.model
    with httpx.stream("POST", f"{live.url}/v1/chat/completions", timeout=30,
                      json={"messages": USER, "stream": True, "stream_options": {"include_usage": True}},
                      headers={"X-Request-ID": "stream-8f31"}) as response:
        lines = response.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        r = _cancel(live.url, "stream-8f31")
        calls_at_cancel = model.calls
        assert r.status_code == 200
        assert r.json() == {"id": "stream-8f31", "object": "chat.completion.cancellation", "cancelled": True}
        rest = [line[6:] for line in lines if line.startswith("data: ")]
    events = decode([first[6:], *rest])
    finish = [e for e in events if e["choices"] and e["choices"][0]["finish_reason"]]
    assert len(finish) == 1 and finish[0]["choices"][0]["finish_reason"] == "cancelled"
    assert finish[0]["choices"][0]["delta"] == {}
    assert events[-1]["choices"] == []  # usage still follows the finish chunk
    # cooperative: generation stopped within one token of the cancel
    assert model.calls - calls_at_cancel <= 2
    assert events[-1]["usage"]["completion_tokens"] < 50
    # once finished the ID is gone: a second cancel is a 404
    late = _cancel(live.url, "stream-8f31")
    assert late.status_code == 404 and late.json()["cancelled"] is False


def test_cancel_unknown_id_is_404_with_envelope(serve) -> None:
    live = serve()
    r = _cancel(live.url, "no-such-request")
    assert r.status_code == 404
    body = r.json()
    assert body["cancelled"] is False and body["id"] == "no-such-request"
    assert body["object"] == "chat.completion.cancellation"
    assert body["error"]["type"] == "not_found_error" and "unknown" in body["error"]["message"]


def test_cancel_after_completion_is_404(serve) -> None:
    live = serve()
    r = httpx.post(f"{live.url}/v1/chat/completions", json={"messages": USER},
                   headers={"X-Request-ID": "done-1"})
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "stop"
    late = _cancel(live.url, "done-1")
    assert late.status_code == 404 and late.json()["cancelled"] is False
    assert "completed" in late.json()["error"]["message"]


def test_cancel_path_id_is_the_correlation_id_not_the_chatcmpl_id(serve) -> None:
    live = serve(Script(LONG, delay_s=0.02))
    with httpx.stream("POST", f"{live.url}/v1/chat/completions", timeout=30,
                      json={"messages": USER, "stream": True},
                      headers={"X-Request-ID": "corr-7"}) as response:
        lines = response.iter_lines()
        first = json.loads(next(line for line in lines if line.startswith("data: "))[6:])
        assert _cancel(live.url, first["id"]).status_code == 404
        assert _cancel(live.url, "corr-7").status_code == 200
        reasons = [json.loads(line[6:])["choices"][0]["finish_reason"] for line in lines
                   if line.startswith("data: {")]
    assert reasons[-1] == "cancelled"


def test_cancel_non_streaming_request(serve) -> None:
    live = serve(Script(LONG, delay_s=0.02))
    out: dict = {}

    def call() -> None:
        out["r"] = httpx.post(f"{live.url}/v1/chat/completions", json={"messages": USER}, timeout=30,
                              headers={"X-Request-ID": "ns-cancel"})

    t = threading.Thread(target=call)
    t.start()
    assert wait_until(lambda: "ns-cancel" in live.state.registry)
    time.sleep(0.1)
    assert _cancel(live.url, "ns-cancel").status_code == 200
    t.join(10)
    body = out["r"].json()
    assert body["choices"][0]["finish_reason"] == "cancelled"
    assert 0 < body["usage"]["completion_tokens"] < 100


def test_cancel_racing_completion_is_consistent(serve) -> None:
    """Whatever the interleaving, 200 ⇔ the stream says cancelled, and 404 ⇔ it does not."""
    # ~12 steps of 20 ms: early cancels land mid-stream even on a loaded machine, late ones
    # race the completion.
    live = serve(Script("a b c d e f g h i j k l", delay_s=0.02))
    outcomes = set()
    for i in range(12):
        rid = f"race-{i}"
        with httpx.stream("POST", f"{live.url}/v1/chat/completions", timeout=30,
                          json={"messages": USER, "stream": True}, headers={"X-Request-ID": rid}) as response:
            time.sleep(0.025 * i)
            status = _cancel(live.url, rid).status_code
            reasons = [json.loads(line[6:])["choices"][0]["finish_reason"]
                       for line in response.iter_lines() if line.startswith("data: {")]
        final = reasons[-1]
        assert (status, final) in {(200, "cancelled"), (404, "stop")}, (status, final)
        outcomes.add(status)
    assert 200 in outcomes  # the early cancels must have landed


def test_client_disconnect_stops_generation(serve) -> None:
    live = serve(Script(LONG, delay_s=0.02))
    model = live.loaded.model
    with httpx.stream("POST", f"{live.url}/v1/chat/completions", timeout=30,
                      json={"messages": USER, "stream": True}, headers={"X-Request-ID": "gone"}) as response:
        lines = response.iter_lines()
        for _ in range(3):
            next(lines)
        assert "gone" in live.state.registry
    # the connection is closed: the scheduler must drain and the ID must be released
    assert wait_until(lambda: live.state.scheduler.load[0] == 0, timeout=5)
    assert "gone" not in live.state.registry
    calls = model.calls
    time.sleep(0.2)
    assert model.calls == calls  # nothing is generating any more
    assert calls < 100  # far from the 400-token script


def test_non_streaming_client_disconnect_stops_generation(serve) -> None:
    live = serve(Script(LONG, delay_s=0.02))
    try:
        httpx.post(f"{live.url}/v1/chat/completions", json={"messages": USER}, timeout=0.5)
    except httpx.ReadTimeout:
        pass
    assert wait_until(lambda: live.state.scheduler.load[0] == 0, timeout=5)
    assert live.loaded.model.calls < 200


def test_duplicate_in_flight_request_id_is_409(serve) -> None:
    live = serve(Script(LONG, delay_s=0.02))
    with httpx.stream("POST", f"{live.url}/v1/chat/completions", timeout=30,
                      json={"messages": USER, "stream": True}, headers={"X-Request-ID": "dup"}) as response:
        assert response.status_code == 200
        r = httpx.post(f"{live.url}/v1/chat/completions", json={"messages": USER},
                       headers={"X-Request-ID": "dup"})
        assert r.status_code == 409
        assert r.json()["error"]["code"] == "duplicate_request_id"
        assert r.json()["error"]["param"] == "X-Request-ID"
        assert _cancel(live.url, "dup").status_code == 200  # the first request is untouched
        assert list(response.iter_lines())[-2] == "data: [DONE]"
    # after completion the ID can be used again
    again = httpx.post(f"{live.url}/v1/chat/completions", json={"messages": USER, "max_tokens": 2},
                       headers={"X-Request-ID": "dup"})
    assert again.status_code == 200


def test_cancel_while_queued_behind_another_request(serve) -> None:
    live = serve(Script(LONG, delay_s=0.02), max_active=1, max_queue=2)
    with httpx.stream("POST", f"{live.url}/v1/chat/completions", timeout=30,
                      json={"messages": USER, "stream": True}, headers={"X-Request-ID": "runner"}) as first:
        runner_lines = first.iter_lines()  # keep it: a dropped iterator closes the connection
        next(runner_lines)
        with httpx.stream("POST", f"{live.url}/v1/chat/completions", timeout=30,
                          json={"messages": USER, "stream": True, "stream_options": {"include_usage": True}},
                          headers={"X-Request-ID": "waiter"}) as queued:
            assert queued.status_code == 200  # admitted to the queue: headers go out at once
            assert _cancel(live.url, "waiter").status_code == 200
            assert _cancel(live.url, "runner").status_code == 200  # frees the slot
            events = decode([line[6:] for line in queued.iter_lines() if line.startswith("data: ")])
    assert events[-2]["choices"][0]["finish_reason"] == "cancelled"
    assert events[-1]["usage"]["completion_tokens"] == 0  # it never ran


def test_cancel_while_queued_ends_the_stream_promptly(serve) -> None:
    """A queued request's cancel ends its stream at once, not when a slot frees: the queued
    stream is over (cancelled, no tokens) while the request holding the only slot still runs
    (docs/protocol.md, Cancellation)."""
    live = serve(Script(LONG, delay_s=0.02), max_active=1, max_queue=2)  # the runner: ~8 s
    with httpx.stream("POST", f"{live.url}/v1/chat/completions", timeout=30,
                      json={"messages": USER, "stream": True}, headers={"X-Request-ID": "runner2"}) as first:
        runner_lines = first.iter_lines()  # keep it: a dropped iterator closes the connection
        next(runner_lines)
        with httpx.stream("POST", f"{live.url}/v1/chat/completions", timeout=30,
                          json={"messages": USER, "stream": True, "stream_options": {"include_usage": True}},
                          headers={"X-Request-ID": "waiter2"}) as queued:
            assert _cancel(live.url, "waiter2").status_code == 200
            events = decode([line[6:] for line in queued.iter_lines() if line.startswith("data: ")])
        # The runner is still in flight (a finished one would be a 404 here).
        still_running = _cancel(live.url, "runner2")
    assert events[-2]["choices"][0]["finish_reason"] == "cancelled"
    assert events[-1]["usage"]["completion_tokens"] == 0
    assert still_running.status_code == 200, still_running.text
