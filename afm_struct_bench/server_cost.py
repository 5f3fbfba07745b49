"""The server's own cost of a ``bench serve`` run: CPU seconds per generated token.

Read from the server's ``/metrics`` (``process_cpu_seconds_total``, user + system time of the
server process), before and after a run, so it works against a remote server and does not count
the load generator's CPU even when both share the machine.  Tokens are the completion tokens the
server reported in each stream's usage.
"""

from __future__ import annotations

import re
import statistics
from typing import Any

import httpx

# One sample line of the Prometheus text format: ``name value`` (this metric has no labels).
_CPU_LINE = re.compile(r"^process_cpu_seconds_total\s+([0-9.eE+-]+)\s*$", re.MULTILINE)


def parse_cpu_seconds(exposition: str) -> float | None:
    """``process_cpu_seconds_total`` from a ``/metrics`` body; None when absent (a server on a
    platform without ``/proc``, or another server)."""
    m = _CPU_LINE.search(exposition)
    return float(m.group(1)) if m else None


async def read_cpu_seconds(http: httpx.AsyncClient) -> float | None:
    """The server's CPU seconds so far, or None when ``/metrics`` does not say (or fails)."""
    try:
        r = await http.get("/metrics", timeout=10)
    except httpx.HTTPError:
        return None
    return parse_cpu_seconds(r.text) if r.status_code == 200 else None


def cost_fields(cpu_before: float | None, cpu_after: float | None, tokens: int) -> dict[str, Any]:
    """A run's ``server_cpu_s`` and ``server_cpu_us_per_token`` (None when unknown)."""
    if cpu_before is None or cpu_after is None:
        return {"server_cpu_s": None, "server_cpu_us_per_token": None}
    cpu = max(cpu_after - cpu_before, 0.0)
    return {"server_cpu_s": cpu, "server_cpu_us_per_token": cpu / tokens * 1e6 if tokens else None}


def mix_label(kinds: list[str]) -> str:
    """A mix's name in results: its kinds joined by ``+``."""
    return "+".join(kinds)


def mix_comparison(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each mix against the first mix of the same round and concurrency: throughput ratio and
    server-CPU-per-token ratio, per round and their median.  Empty with a single mix.

    Ratios are taken within a round (mixes run back to back), so a shared machine whose speed
    drifts over minutes biases no mix against another."""
    mixes = list(dict.fromkeys(r["mix"] for r in runs if "mix" in r))
    if len(mixes) < 2:
        return {}
    base_mix = mixes[0]
    cells: dict[tuple[int, int], dict[str, dict[str, Any]]] = {}
    for r in runs:
        cells.setdefault((r.get("round", 1), r["concurrency"]), {})[r["mix"]] = r
    per: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for (rnd, conc), by_mix in sorted(cells.items()):
        base = by_mix.get(base_mix)
        if base is None:
            continue
        for mix, r in by_mix.items():
            if mix == base_mix:
                continue
            per.setdefault(mix, {}).setdefault(str(conc), []).append({
                "round": rnd,
                "throughput": _ratio(r.get("throughput_tok_s"), base.get("throughput_tok_s")),
                "cpu_per_token": _ratio(r.get("server_cpu_us_per_token"),
                                        base.get("server_cpu_us_per_token"))})
    out: dict[str, Any] = {"baseline": base_mix, "mixes": {}}
    for mix, by_conc in per.items():
        out["mixes"][mix] = {}
        for conc, rows in by_conc.items():
            out["mixes"][mix][conc] = {"by_round": rows, "median": {
                key: _median([x[key] for x in rows]) for key in ("throughput", "cpu_per_token")}}
    return out


def comparison_markdown(comparison: dict[str, Any]) -> str:
    """The mix comparison as a table (one row per mix and concurrency)."""
    if not comparison:
        return ""
    base = comparison["baseline"]
    lines = [f"| mix vs {base} | concurrency | throughput, per round | median | "
             "server CPU per token, per round | median |", "|---|---|---|---|---|---|"]
    for mix, by_conc in comparison["mixes"].items():
        for conc, cell in by_conc.items():
            thr = " / ".join(_x(x["throughput"]) for x in cell["by_round"])
            cpu = " / ".join(_x(x["cpu_per_token"]) for x in cell["by_round"])
            med = cell["median"]
            lines.append(f"| {mix} | {conc} | {thr} | {_x(med['throughput'])} | {cpu} | "
                         f"{_x(med['cpu_per_token'])} |")
    return "\n".join(lines)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"
