"""X-AFM-Profile: true / extended, streaming and not (scripted model, real HTTP)."""

from __future__ import annotations

import itertools
import sys

import httpx

from afm_struct.testing import Script

from .conftest import USER, decode, stream_raw

SLOW = Script(" ".join(f"t{i}" for i in range(30)), delay_s=0.05)  # ~1.5 s of generation


def _check_summary(profile: dict, live) -> None:
    assert profile["model"] == "scripted" and profile["device"] == live.loaded.info.device
    mem = profile["memory"]
    assert mem["weights_bytes"] == live.loaded.info.weight_bytes
    assert mem["rss_bytes"] > 0 and mem["rss_peak_bytes"] >= mem["rss_bytes"] // 2
    assert mem["mlx_peak_bytes"] is None or mem["mlx_peak_bytes"] >= 0
    assert profile["prefill_tok_s"] > 0 and profile["decode_tok_s"] > 0
    assert profile["tokens"]["completion"] > 0
    # unavailable figures are null with a reason, never invented
    for key in ("power_w", "estimated_bandwidth_gbps"):
        assert (profile[key] is None) == (key in profile["unavailable"])
    if sys.platform.startswith("linux") and profile["power_w"] is None:
        assert "RAPL" in profile["unavailable"]["power_w"]
    assert "weight" in profile["unavailable"]["estimated_bandwidth_gbps"]  # scripted: no weights


def test_profile_true_is_the_last_event_before_done(serve) -> None:
    live = serve()
    _, payloads = stream_raw(live.url, {"messages": USER, "stream_options": {"include_usage": True}},
                             {"X-AFM-Profile": "true"})
    events = decode(payloads)
    assert set(events[-1]) == {"afm_profile"}  # an AFM extension: no choices array
    assert events[-2]["choices"] == [] and "usage" in events[-2]  # after usage
    _check_summary(events[-1]["afm_profile"], live)
    assert events[-1]["afm_profile"]["tokens"]["completion"] == events[-2]["usage"]["completion_tokens"]


def test_profile_without_usage_follows_the_finish_chunk(serve) -> None:
    live = serve()
    _, payloads = stream_raw(live.url, {"messages": USER}, {"X-AFM-Profile": "true"})
    events = decode(payloads)
    assert set(events[-1]) == {"afm_profile"}
    assert events[-2]["choices"][0]["finish_reason"] == "stop"


def test_no_profile_unless_asked(serve) -> None:
    live = serve()
    for header in ({}, {"X-AFM-Profile": "false"}):
        _, payloads = stream_raw(live.url, {"messages": USER}, header)
        assert all("afm_profile" not in e and "afm_profile_extended" not in e for e in decode(payloads))


def test_profile_extended_samples_at_least_every_250ms(serve) -> None:
    live = serve(SLOW)
    _, payloads = stream_raw(live.url, {"messages": USER, "stream_options": {"include_usage": True}},
                             {"X-AFM-Profile": "extended"})
    events = decode(payloads)
    assert set(events[-1]) == {"afm_profile_extended"}
    ext = events[-1]["afm_profile_extended"]
    _check_summary(ext["summary"], live)
    samples = ext["samples"]
    assert ext["summary"]["sample_count"] == len(samples)
    times = [s["t_s"] for s in samples]
    assert times[-1] > 1.0 and len(samples) >= 5  # the series spans the generation
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert max(gaps) <= 0.25, gaps
    tokens = [s["tokens"] for s in samples]
    assert tokens == sorted(tokens) and tokens[-1] >= 25  # progress is visible in the series
    assert any(s["tok_s"] for s in samples[1:])
    assert all(s["rss_bytes"] > 0 for s in samples)


def test_profile_in_non_streaming_response(serve) -> None:
    live = serve()
    body = httpx.post(f"{live.url}/v1/chat/completions", json={"messages": USER},
                      headers={"X-AFM-Profile": "true"}).json()
    _check_summary(body["afm_profile"], live)
    assert body["afm_profile"]["tokens"]["completion"] == body["usage"]["completion_tokens"]
    body = httpx.post(f"{live.url}/v1/chat/completions", json={"messages": USER},
                      headers={"X-AFM-Profile": "extended"}).json()
    assert set(body["afm_profile_extended"]) == {"summary", "samples"}
    assert "afm_profile" not in body
