"""The report of ``bench soak``: counts from the rows of one run, the verdict, the Markdown.

The verdict holds the four things a hostile soak must show: no ordinary request harmed, no
5xx for any request, no constrained output cut by max_tokens that is invalid without saying
so (``X-Grammar-Constraints: downgraded``), and resident memory at the end within 5 % of the
value after warm-up.  Every hostile request must also get a clean 4xx or a correct answer.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from .environment import environment
from .hostile_client import OK_RESULTS
from .serve import percentiles

RSS_TOLERANCE = 0.05
HARM_LISTED = 50
NEARBY_S = 5.0
SLACK_S = 0.25


def _hostile_brief(row: dict[str, Any], at: float) -> dict[str, Any]:
    return {"rid": row.get("rid"), "kind": row["kind"], "variant": row.get("variant"),
            "result": row.get("result"), "status": row.get("status"), "t0": row.get("t0"),
            "t1": row.get("t1"), "started_s_before": round(at - row.get("t0", at), 3),
            "ended_s_before": round(at - row.get("t1", at), 3)}


def harm_list(harmed: list[dict[str, Any]], hostile: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each harmed request (t1 is when its failure was seen) with: the hostile requests in
    flight during it, the last hostile request that started before its failure, and, per kind,
    the last failed hostile request (5xx, error chunk, ...) to end in the ``NEARBY_S`` seconds
    before its failure (``SLACK_S`` after it too: the two clients see one failure at about the
    same time), latest first."""
    failed = [h for h in hostile if h.get("result") not in OK_RESULTS]
    out = []
    for r in harmed[:HARM_LISTED]:
        t0, t1 = r.get("t0", 0.0), r.get("t1", 0.0)
        during = [h for h in hostile if h.get("t0", 0.0) < t1 and h.get("t1", 0.0) >= t0]
        last = max((h for h in hostile if h.get("t0", 0.0) < t1), key=lambda h: h["t0"], default=None)
        latest: dict[str, dict[str, Any]] = {}  # per kind, the last to fail before this failure
        for h in failed:
            end = h.get("t1", 0.0)
            if t1 - NEARBY_S <= end <= t1 + SLACK_S and end > latest.get(h["kind"], {}).get("t1", -1.0):
                latest[h["kind"]] = h
        nearby = sorted(latest.values(), key=lambda h: -h.get("t1", 0.0))
        out.append({"rid": r.get("rid"), "kind": r["kind"], "action": r.get("action"),
                    "status": r.get("status"), "error": r.get("error"), "t0": t0, "t1": t1,
                    "hostile_in_flight": len(during),
                    "hostile_failed_in_flight": sum(h in failed for h in during),
                    "hostile_during": [_hostile_brief(h, t1) for h in during[:10]],
                    "last_hostile_before": None if last is None else _hostile_brief(last, t1),
                    "failed_hostile_nearby": [_hostile_brief(h, t1) for h in nearby]})
    return out


def hostile_by_kind(hostile: list[dict[str, Any]]) -> dict[str, Any]:
    """Per kind: requests, results, HTTP statuses, error types, results per variant, and the
    first few unacceptable rows."""
    kinds: dict[str, Any] = {}
    for h in hostile:
        k = kinds.setdefault(h["kind"], {"sent": 0, "results": Counter(), "statuses": Counter(),
                                         "errors": Counter(), "variants": {}, "bad_examples": []})
        k["sent"] += 1
        k["results"][h.get("result", "?")] += 1
        k["statuses"][str(h.get("status"))] += 1
        if h.get("error"):
            k["errors"][h["error"]] += 1
        k["variants"].setdefault(h.get("variant"), Counter())[h.get("result", "?")] += 1
        if h.get("result") not in OK_RESULTS and len(k["bad_examples"]) < 3:
            k["bad_examples"].append({key: h.get(key) for key in (
                "rid", "variant", "status", "result", "error", "message", "why", "finish", "t0", "t1")})
        if h["kind"] == "control_tokens" and h.get("prompt_tokens") is not None:
            k.setdefault("prompt_tokens", {})[h["variant"]] = h["prompt_tokens"]
    for k in kinds.values():
        for key in ("results", "statuses", "errors"):
            k[key] = dict(k[key])
        k["variants"] = {v: dict(c) for v, c in k["variants"].items()}
    return dict(sorted(kinds.items()))


def _ratio(a: int | None, b: int | None) -> float | None:
    return a / b if a and b else None


def summarize(rows: list[dict[str, Any]], *, url: str, minutes: float, concurrency: int, seed: int,
              wall: float, rss: dict[str, int | None],
              samples: list[tuple[float, int | None, float, str | None]],
              in_flight_after: Any, hostility: Any, hostile_info: dict[str, Any],
              limits: dict[str, Any]) -> dict[str, Any]:
    """The report of a soak from its rows (ordinary and hostile)."""
    ordinary = [r for r in rows if not r.get("hostile")]
    hostile = [r for r in rows if r.get("hostile")]
    outcomes = Counter(r["outcome"] for r in ordinary if "outcome" in r)
    errors = Counter(r["error"] for r in ordinary if r.get("outcome") == "error")
    invalid = [r["invalid"] for r in ordinary if r.get("invalid")]
    cut = [r for r in ordinary if r.get("length_invalid")]
    ttft = percentiles([r["ttft_s"] for r in ordinary if r.get("ttft_s") is not None])
    warm = rss.get("warm") or rss.get("start")
    known = [b for _, b, _, _ in samples if b] + [b for b in rss.values() if b]
    rss = {**rss, "peak": max(known) if known else None}
    growth = (rss["end"] / warm - 1) if warm and rss.get("end") else None
    busy_drift = _busy_drift(samples, wall)
    cancels = [r for r in ordinary if r["action"] == "cancel" and "cancel_ok" in r]
    harmed = [r for r in ordinary if r.get("outcome") == "error"]
    # 503 is admission control (a full queue, with Retry-After), not a failure.
    five = [r for r in rows if (r.get("status") or 0) >= 500 and r.get("status") != 503]
    chunks = [r for r in rows if r.get("result") == "error_chunk"
              or str(r.get("error", "")).startswith("stream_error:")]
    hostile_cut = [r for r in hostile if r.get("finish") == "length" and r.get("result") in
                   ("wrong", "answered_flagged")]
    hostile_bad = Counter(r.get("result") for r in hostile if r.get("result") not in OK_RESULTS)
    end_ratio = _ratio(rss.get("end"), warm)
    length_unflagged = sum(not r.get("downgraded") for r in cut) + \
        sum(r["result"] == "wrong" for r in hostile_cut)
    report = {
        "url": url, "minutes": minutes, "concurrency": concurrency, "seed": seed, "wall_s": wall,
        "requests": len(rows), "ordinary_requests": len(ordinary),
        "outcomes": dict(outcomes), "errors_by_kind": dict(errors),
        "errors": sum(errors.values()), "invalid": len(invalid), "invalid_examples": invalid[:10],
        "cut_unparseable": sum(unparseable(r["length_invalid"]) for r in cut),
        "length_invalid": {
            "ordinary": {"unflagged": sum(not r.get("downgraded") for r in cut),
                         "flagged": sum(bool(r.get("downgraded")) for r in cut),
                         "unparseable": sum(unparseable(r["length_invalid"]) for r in cut),
                         "examples": [r["length_invalid"] for r in cut if not r.get("downgraded")][:10]},
            "hostile": {"unflagged": sum(r["result"] == "wrong" for r in hostile_cut),
                        "flagged": sum(r["result"] == "answered_flagged" for r in hostile_cut)}},
        "downgraded": sum(bool(r.get("downgraded")) for r in ordinary),
        "by_kind": dict(Counter(r["kind"] for r in ordinary)),
        "burst_requests": sum(bool(r.get("burst")) for r in ordinary),
        # A cancel that lands while the stream's last step runs may lose the race: the server
        # acknowledged it, but the stream had already finished its own way.
        "cancels": {"sent": len(cancels),
                    "honoured": sum(r.get("finish") == "cancelled" for r in cancels),
                    "raced_finish": sum(r.get("finish") not in (None, "cancelled") for r in cancels),
                    "acknowledged": sum(bool(r["cancel_ok"]) for r in cancels)},
        "ttft_ms": {k: None if v is None else v * 1000 for k, v in ttft.items()},
        "harmed": {"count": len(harmed), "by_error": dict(Counter(r["error"] for r in harmed)),
                   "list": harm_list(harmed, hostile)},
        "http_5xx": {"total": len(five), "hostile": sum(bool(r.get("hostile")) for r in five),
                     "ordinary": sum(not r.get("hostile") for r in five),
                     "by_kind": dict(Counter(r["kind"] for r in five))},
        "error_chunks": {"total": len(chunks), "hostile": sum(bool(r.get("hostile")) for r in chunks),
                         "ordinary": sum(not r.get("hostile") for r in chunks)},
        "hostile": {"share": hostility.share, "kinds": list(hostility.kinds) if hostility.share else [],
                    "sent": len(hostile), "acceptable": len(hostile) - sum(hostile_bad.values()),
                    "unacceptable": dict(hostile_bad),
                    "results": dict(Counter(r.get("result") for r in hostile)),
                    "by_kind": hostile_by_kind(hostile), **hostile_info},
        "rss_bytes": rss, "rss_growth_from_warm": growth, "rss_end_over_warm": end_ratio,
        "rss_peak_over_warm": _ratio(rss.get("peak"), warm),
        "rss_busy_drift": busy_drift,
        "rss_samples": [[t, b] for t, b, _, _ in samples],
        "health": {"probes": len(samples), "failures": sum(e is not None for *_, e in samples),
                   "errors": dict(Counter(e for *_, e in samples if e is not None)),
                   "max_latency_s": round(max((lat for _, _, lat, _ in samples), default=0.0), 3)},
        "in_flight_after": in_flight_after, "limits": limits,
        "environment": environment(),
    }
    report["verdict"] = {
        "ordinary_harmed_0": not harmed,
        "http_5xx_0": not five,
        "length_invalid_unflagged_0": length_unflagged == 0,
        "rss_end_within_5pct_of_warm": None if end_ratio is None else end_ratio <= 1 + RSS_TOLERANCE,
        "hostile_all_acceptable": not hostile_bad,
    }
    return report


def unparseable(why: str) -> bool:
    """Whether a cut-output reason says the output does not even parse."""
    return "JSONDecodeError" in why or "no tool call" in why


def _mb(x: int | None) -> str:
    return "-" if x is None else f"{x / 2**20:.0f} MB"


def _counts(d: dict[str, Any] | None) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted((d or {}).items(), key=lambda kv: -kv[1])) or "-"


def markdown(report: dict[str, Any]) -> str:
    """The summary table; with hostile traffic, one table per hostile kind and the harmed list.
    Reports written before the hostile mix existed render with dashes where a field is absent."""
    rss, t = report["rss_bytes"], report["ttft_ms"]
    growth = report.get("rss_growth_from_warm")
    ratio = report.get("rss_end_over_warm") or (None if growth is None else 1 + growth)
    hostile = report.get("hostile") or {}
    harmed = report.get("harmed") or {}
    five, chunks = report.get("http_5xx") or {}, report.get("error_chunks") or {}
    cut = report.get("length_invalid") or {}
    cut_o, cut_h = cut.get("ordinary") or {}, cut.get("hostile") or {}
    verdict = report.get("verdict") or {}
    rows = [
        ("duration", f"{report['minutes']} min, concurrency {report['concurrency']}, seed {report['seed']}"),
        ("requests", f"{report['requests']}" + (f" ({report.get('ordinary_requests')} ordinary, "
                                                 f"{hostile.get('sent')} hostile at share "
                                                 f"{hostile.get('share')})" if hostile.get("sent") else "")),
        ("outcomes (ordinary)", _counts(report["outcomes"])),
        ("errors (not 503)", f"{report['errors']} {report['errors_by_kind'] or ''}".strip()),
        ("ordinary requests harmed", "-" if not harmed else
         f"{harmed['count']} {harmed['by_error'] or ''}".strip()),
        ("5xx (any request)", "-" if not five else
         f"{five['total']} (hostile {five['hostile']}, ordinary {five['ordinary']})"),
        ("error chunks (any request)", "-" if not chunks else
         f"{chunks['total']} (hostile {chunks['hostile']}, ordinary {chunks['ordinary']})"),
        ("hostile answered cleanly (4xx or right answer)", "-" if not hostile.get("sent") else
         f"{hostile['acceptable']}/{hostile['sent']} (not: {_counts(hostile['unacceptable'])})"),
        ("invalid outputs", str(report["invalid"])),
        ("invalid at length: unflagged / flagged downgraded", "-" if not cut else
         f"ordinary {cut_o.get('unflagged')} / {cut_o.get('flagged')}, "
         f"hostile {cut_h.get('unflagged')} / {cut_h.get('flagged')}"),
        ("constrained outputs cut by max_tokens that do not parse", str(report["cut_unparseable"])),
        ("cancels honoured (else finished first)",
         f"{report['cancels']['honoured']}/{report['cancels']['sent']} "
         f"({report['cancels']['raced_finish']} finished first)"),
        ("TTFT p50 / p99", "-" if t["p50"] is None else f"{t['p50']:.0f} / {t['p99']:.0f} ms"),
        ("RSS start / warm / peak / end",
         " / ".join(_mb(rss.get(k)) for k in ("start", "warm", "peak", "end"))),
        ("RSS end / warm", "-" if ratio is None else f"{ratio:.3f}" if growth is None
         else f"{ratio:.3f} ({growth * 100:+.1f}%)"),
        ("RSS growth from warm", "-" if growth is None else f"{growth * 100:+.1f}%"),
        ("RSS under traffic, last 5 min / first 5 min after warm-up", _drift_cell(report)),
        ("/health probes failed", "-" if "health" not in report else
         f"{report['health']['failures']}/{report['health']['probes']} "
         f"{report['health'].get('errors') or ''} (slowest {report['health']['max_latency_s']} s)"),
        ("in flight after", str(report["in_flight_after"])),
        ("verdict", ", ".join(f"{k} {'-' if v is None else 'pass' if v else 'FAIL'}"
                              for k, v in verdict.items()) or "-"),
    ]
    lines = ["| measure | value |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)]
    if hostile.get("by_kind"):
        lines += ["", "| hostile kind | sent | results | HTTP statuses | errors |", "|---|---|---|---|---|"]
        for kind, k in hostile["by_kind"].items():
            lines.append(f"| {kind} | {k['sent']} | {_counts(k['results'])} | {_counts(k['statuses'])} "
                         f"| {_counts(k['errors'])} |")
    probe = hostile.get("control_token_probe")
    if probe:
        lines += ["", "Control-token strings typed as text, prompt tokens each (1 = forged): " +
                  ", ".join(f"`{m}` {'-' if c is None else f'{c:g}'}"
                            for m, c in probe["tokens_per_marker"].items())]
    if harmed.get("list"):
        lines += ["", "| harmed request | kind | error | t0-t1 s | hostile in flight (failed) "
                      "| last failed hostile request per kind (s from this failure) |",
                  "|---|---|---|---|---|---|"]
        for h in harmed["list"][:20]:
            nearby = h.get("failed_hostile_nearby", [])[:3]
            nearest = "; ".join(f"{n['kind']} {n['variant']} ({n['result']}) {n['rid']} "
                                f"{-n['ended_s_before']:+.2f}" for n in nearby) or "-"
            lines.append(f"| {h['rid']} | {h['kind']} | {h['error']} | {h['t0']}-{h['t1']} "
                         f"| {h['hostile_in_flight']} ({h.get('hostile_failed_in_flight', 0)}) | {nearest} |")
    return "\n".join(lines)


def _busy_drift(samples: list[tuple[float, int | None, float, str | None]],
                wall: float, window_s: float = 300.0) -> dict[str, float] | None:
    """Median RSS under traffic in the first ``window_s`` after warm-up against the last.

    "end" is the idle size; this compares busy with busy, so a leak shows as a late median
    above the early one even when idle trimming hides it at the end.
    """
    warm_t = min(60.0, wall / 2)
    early = sorted(b for t, b, _, _ in samples if b and warm_t <= t < warm_t + window_s)
    late = sorted(b for t, b, _, _ in samples if b and t >= max(wall - window_s, warm_t + window_s))
    if not early or not late:
        return None
    e, la = early[len(early) // 2], late[len(late) // 2]
    return {"early_median": e, "late_median": la, "late_over_early": round(la / e, 4)}


def _drift_cell(report: dict[str, Any]) -> str:
    drift = report.get("rss_busy_drift")
    if not drift:
        return "-"
    return (f"{_mb(drift['late_median'])} / {_mb(drift['early_median'])} = "
            f"{drift['late_over_early']:.3f} (medians)")
