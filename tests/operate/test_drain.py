"""SIGTERM during 10 real streams: a real ``afm-struct serve`` process drains, then exits 0.

Short streams finish (``length``) inside the grace period; long ones are cancelled once it is
over, each with its finish chunk, usage and ``[DONE]``; while draining, ``/health`` and new
requests answer 503.  The same process logs JSON: every stderr line parses, one line per
request carries the fields an operator needs, and no prompt text.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field

import httpx

from .conftest import ServeProcess

GRACE_S = 6.0
SECRET = "zebra-secret-42"
USER = [{"role": "user", "content": f"count for {SECRET}"}]
SHORT, LONG = 8, 2000  # max_tokens: done in a fraction of the grace / minutes at 50 tokens/s


@dataclass
class Stream:
    """What one client saw."""

    request_id: str
    max_tokens: int
    payloads: list[str] = field(default_factory=list)
    error: BaseException | None = None
    ended_at: float = 0.0
    first: threading.Event = field(default_factory=threading.Event)

    def run(self, url: str) -> None:
        try:
            with httpx.stream("POST", f"{url}/v1/chat/completions", timeout=120,
                              headers={"X-Request-ID": self.request_id},
                              json={"messages": USER, "stream": True, "max_tokens": self.max_tokens,
                                    "stream_options": {"include_usage": True}}) as r:
                assert r.status_code == 200, r.read()
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        self.payloads.append(line[6:])
                        self.first.set()
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.error = exc
        finally:
            self.ended_at = time.monotonic()
            self.first.set()

    @property
    def finish_reason(self) -> str | None:
        for p in self.payloads:
            if p != "[DONE]":
                choices = json.loads(p)["choices"]
                if choices and choices[0].get("finish_reason"):
                    return str(choices[0]["finish_reason"])
        return None


def test_sigterm_drains_ten_streams_then_exits_0(serve_process) -> None:
    server: ServeProcess = serve_process(["--model", "scripted:50", "--max-active", "10", "--max-queue", "4",
                                          "--drain-seconds", str(GRACE_S), "--log-format", "json"])
    server.wait_ready()
    streams = [Stream(f"drain-{i}", SHORT if i % 2 else LONG) for i in range(10)]
    # The short ones start last so that they are still running when SIGTERM comes.
    threads = [threading.Thread(target=s.run, args=(server.url,)) for s in streams]
    for s, t in zip(streams, threads, strict=True):
        if s.max_tokens == LONG:
            t.start()
    assert all(s.first.wait(60) for s in streams if s.max_tokens == LONG)
    for s, t in zip(streams, threads, strict=True):
        if s.max_tokens == SHORT:
            t.start()
    assert all(s.first.wait(60) for s in streams)
    sigterm_at = time.monotonic()
    server.proc.send_signal(15)
    # Draining: the health check takes the replica out; new work is refused with Retry-After.
    # (Generous: on a loaded 2-core machine a busy server takes a while to answer at all.)
    deadline = time.monotonic() + 30
    while (health := httpx.get(f"{server.url}/health", timeout=10)).status_code != 503:
        assert time.monotonic() < deadline, f"health never reported draining:\n{server.stderr()[-3000:]}"
        time.sleep(0.05)
    assert health.json()["status"] == "draining"
    refused = httpx.post(f"{server.url}/v1/chat/completions", json={"messages": USER}, timeout=10)
    assert refused.status_code == 503 and refused.headers["retry-after"]
    assert refused.json()["error"]["code"] == "draining"
    for t in threads:
        t.join(120)
    assert server.proc.wait(timeout=60) == 0, server.stderr()

    for s in streams:
        assert s.error is None, (s.request_id, s.error)
        assert s.payloads and s.payloads[-1] == "[DONE]", (s.request_id, s.payloads[-3:])
        usage = [json.loads(p) for p in s.payloads[:-1] if json.loads(p).get("usage")]
        assert len(usage) == 1  # the usage chunk came after the finish
        if s.max_tokens == SHORT:
            assert s.finish_reason == "length", s.request_id
        else:
            assert s.finish_reason == "cancelled", s.request_id
            assert s.ended_at >= sigterm_at + GRACE_S  # not cut before the grace was over

    lines = server.stderr().splitlines()
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all({"ts", "level", "logger", "msg"} <= set(r) for r in records)
    assert SECRET not in server.stderr()  # no prompt text without --log-content
    by_id = {r["request_id"]: r for r in records if r.get("logger") == "afm_struct.requests"}
    for s in streams:
        r = by_id[s.request_id]
        assert r["endpoint"] == "/v1/chat/completions" and r["status"] == 200 and r["stream"] is True
        assert r["finish_reason"] == s.finish_reason and r["mode"] == "text"
        assert r["prompt_tokens"] > 0 and r["completion_tokens"] > 0
        assert r["ttft_s"] > 0 and r["latency_s"] >= r["ttft_s"] and r["client"].startswith("127.0.0.1:")
    refused_log = [r for r in records if r.get("logger") == "afm_struct.requests" and r["status"] == 503
                   and r["endpoint"] == "/v1/chat/completions"]
    assert len(refused_log) == 1 and refused_log[0]["error_type"] == "server_error"
