"""Populate deploy/grafana-dashboard.json's panels and plot them (docs/report/dashboard.png).

A 3-replica scripted cluster (``afm-struct cluster`` machinery) and a real Prometheus scraping
it each second; a few minutes of mixed traffic (text, json_schema, tools; a burst past capacity
for 503s, cancels, clients that leave); then every panel's queries, exactly as the dashboard
has them (``$__rate_interval`` = 15s), read back with Prometheus' ``query_range`` and drawn in
the dashboard's grid.  No Grafana is needed: the figure shows what the dashboard shows.

    LD_PRELOAD=$(.venv/bin/python -m afm_struct.models.blas) \
        .venv/bin/python scripts/dashboard_figure.py [--seconds 150] [--out docs/report/dashboard.png]
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from afm_struct.cli.cluster import Cluster

ROOT = Path(__file__).resolve().parents[1]
KEY = "dashboard-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
USER = [{"role": "user", "content": "count"}]
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}, "label": {"type": "string"}},
          "required": ["n"], "additionalProperties": False}
TOOL = {"type": "function", "function": {"name": "count", "parameters": {
    "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_prometheus(home: Path, cluster: Cluster) -> tuple[subprocess.Popen[bytes], str]:
    config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"}, "scrape_configs": [
        {"job_name": "afm", "authorization": {"credentials": KEY},
         "static_configs": [{"targets": [f"127.0.0.1:{r.port}" for r in cluster.members]}]},
        {"job_name": "haproxy", "static_configs": [{"targets": [f"127.0.0.1:{cluster.metrics_port}"]}]}]}
    (home / "prometheus.yml").write_text(json.dumps(config))
    port = free_port()
    proc = subprocess.Popen(["prometheus", f"--config.file={home / 'prometheus.yml'}",
                             f"--storage.tsdb.path={home / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("prometheus did not start")


def one_request(url: str, rng: random.Random) -> None:
    kind = rng.random()
    body: dict = {"messages": USER, "max_tokens": rng.choice([8, 16, 32, 64])}
    if kind < 0.35:
        body["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "n", "strict": True, "schema": SCHEMA}}
    elif kind < 0.55:
        body |= {"tools": [TOOL], "tool_choice": "required"}
    elif kind < 0.6:
        body["temperature"] = -1  # a 400
    headers = {**AUTH, "X-Request-ID": f"dash-{rng.getrandbits(48):x}"}
    with httpx.Client(base_url=url, headers=headers, timeout=120) as client:
        if rng.random() < 0.5:
            client.post("/v1/chat/completions", json=body)
            return
        with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
            for i, _line in enumerate(r.iter_lines()):
                if i == 6 and rng.random() < 0.08:
                    client.post(f"/v1/chat/completions/{headers['X-Request-ID']}/cancel")
                if i == 4 and rng.random() < 0.05:
                    return  # a client that leaves


def load(url: str, seconds: float) -> None:
    """Traffic that rises, bursts past capacity, then falls."""
    rng = random.Random(7)
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=64) as pool:
        while (t := time.monotonic() - start) < seconds:
            phase = t / seconds
            concurrency = 4 + int(40 * phase) if phase < 0.6 else (70 if phase < 0.75 else 6)
            futures = [pool.submit(one_request, url, random.Random(rng.random())) for _ in range(concurrency)]
            for f in futures:
                try:
                    f.result()
                except httpx.HTTPError:
                    pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=150.0)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "report" / "dashboard.png")
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dashboard = json.loads((ROOT / "deploy" / "grafana-dashboard.json").read_text())
    home = Path(tempfile.mkdtemp(prefix="afm-dashboard-"))
    cluster = Cluster(3, free_port(), ["--model", "scripted:100", "--log-level", "warning",
                                       "--max-active", "6", "--max-queue", "6"],
                      api_keys=(KEY,), log=lambda _line: None, run_dir=home / "cluster")
    cluster.start()
    prometheus, prom_url = start_prometheus(home, cluster)
    try:
        time.sleep(5)
        begin = time.time()
        load(cluster.url, args.seconds)
        time.sleep(20)
        end = time.time()
        panels = dashboard["panels"]
        cols = 3
        rows = (len(panels) + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(18, 3.6 * rows), constrained_layout=True)
        for ax, panel in zip(axes.flat, panels, strict=False):
            for target in panel["targets"]:
                expr = target["expr"].replace("$__rate_interval", "15s")
                r = httpx.get(f"{prom_url}/api/v1/query_range", timeout=30,
                              params={"query": expr, "start": begin, "end": end, "step": 2})
                for series in r.json()["data"]["result"]:
                    xs = [float(t) - begin for t, _ in series["values"]]
                    ys = [float(v) for _, v in series["values"]]
                    label = target["legendFormat"]
                    for key, value in series["metric"].items():
                        label = label.replace("{{" + key + "}}", value)
                    ax.plot(xs, ys, label=label, linewidth=1.2)
            ax.set_title(panel["title"], fontsize=10)
            ax.set_xlabel("seconds", fontsize=8)
            unit = panel["fieldConfig"]["defaults"]["unit"]
            ax.set_ylabel({"s": "seconds", "reqps": "requests/s", "percentunit": "share"}.get(unit, ""),
                          fontsize=8)
            ax.tick_params(labelsize=7)
            if ax.lines:
                ax.legend(fontsize=7, loc="upper left")
        for ax in list(axes.flat)[len(panels):]:
            ax.axis("off")
        fig.suptitle(f"deploy/grafana-dashboard.json, populated: 3 scripted replicas behind HAProxy, "
                     f"{args.seconds:.0f} s of mixed traffic (Prometheus query_range)", fontsize=12)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.out, dpi=80)
        print(f"wrote {args.out}")
    finally:
        prometheus.terminate()
        prometheus.wait(timeout=30)
        cluster.stop(grace_s=10)


if __name__ == "__main__":
    main()
