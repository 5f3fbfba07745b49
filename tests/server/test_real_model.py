"""The embedded model behind the server: cancellation and concurrent greedy streams."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from afm_struct.client import Client

from .conftest import decode, stream_raw

pytestmark = pytest.mark.model


def test_real_model_cancel_stops_within_a_token(real_server) -> None:
    with httpx.stream("POST", f"{real_server.url}/v1/chat/completions", timeout=120,
                      json={"messages": [{"role": "user", "content": "Tell me a long story."}],
                            "stream": True, "max_tokens": 400, "temperature": 0,
                            "stream_options": {"include_usage": True}},
                      headers={"X-Request-ID": "real-cancel"}) as response:
        lines = response.iter_lines()
        seen = 0
        for line in lines:
            if line.startswith("data: {"):
                seen += 1
                if seen == 3:
                    assert httpx.post(f"{real_server.url}/v1/chat/completions/real-cancel/cancel"
                                      ).status_code == 200
                    break
        rest = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
    finish = [e for e in rest if e["choices"] and e["choices"][0]["finish_reason"]]
    assert finish[0]["choices"][0]["finish_reason"] == "cancelled"
    usage = rest[-1]["usage"]
    # tokens already in flight when the cancel landed: at most a couple past what was read
    assert usage["completion_tokens"] <= seen + len(rest) + 2 < 20


def test_concurrent_greedy_streams_match_their_solo_runs(real_server) -> None:
    prompts = ["Name a fruit.", "What is 2+2?", "Say hello in French."]
    body = {"max_tokens": 16, "temperature": 0}
    with Client(real_server.url) as client:
        solo = [client.chat([{"role": "user", "content": p}], **body).content for p in prompts]
    together: dict[int, str] = {}

    def run(i: int) -> None:
        _, payloads = stream_raw(real_server.url, {"messages": [{"role": "user", "content": prompts[i]}],
                                                   **body})
        together[i] = "".join(e["choices"][0]["delta"].get("content", "") for e in decode(payloads)
                              if e["choices"])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [together[i] for i in range(len(prompts))] == solo
    assert len(set(solo)) == len(solo)  # different prompts, different answers: a mix-up would show
