"""A real Prometheus scrapes a real 3-replica scripted cluster (and HAProxy's exporter); after
known traffic through the balancer, its HTTP API reports the same counts.

Skipped, with the reason, where Prometheus or HAProxy is not installed (``make setup`` installs
both on Debian).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from afm_struct.cli.cluster_supervisor import Cluster

from .conftest import free_port

for _binary in ("prometheus", "haproxy"):
    if shutil.which(_binary) is None:
        pytest.skip(f"{_binary} is not installed (make setup installs it on Debian: apt-get install -y "
                    f"{_binary})", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
KEY = "prometheus-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
          "additionalProperties": False}
USER = [{"role": "user", "content": "count"}]
ROUTE = "/v1/chat/completions"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three scripted replicas behind HAProxy, with an API key."""
    c = Cluster(3, free_port(), ["--model", "scripted:500", "--log-level", "warning"], api_keys=(KEY,),
                log=lambda _line: None, run_dir=tmp_path_factory.mktemp("cluster"))
    c.start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def prometheus(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Prometheus on a free port, scraping every replica's /metrics (with the key) and HAProxy's
    exporter each second; its data in a temporary directory."""
    home = tmp_path_factory.mktemp("prometheus")
    replicas = [f"127.0.0.1:{r.port}" for r in cluster.members]
    config = {  # JSON is YAML
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": "afm", "authorization": {"credentials": KEY},
             "static_configs": [{"targets": replicas}]},
            {"job_name": "haproxy", "static_configs": [{"targets": [f"127.0.0.1:{cluster.metrics_port}"]}]},
        ],
    }
    (home / "prometheus.yml").write_text(json.dumps(config))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with open(home / "prometheus.log", "wb") as log:
        proc = subprocess.Popen(["prometheus", f"--config.file={home / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={home / 'data'}",
                                 f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (home / "prometheus.log").read_text()
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def query(url: str, promql: str) -> float | None:
    """The single value of an instant query (None when it has no result yet)."""
    r = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=10)
    r.raise_for_status()
    body = r.json()
    assert body["status"] == "success", body
    result = body["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def settled(url: str, promql: str, want: float, timeout: float = 60.0) -> float | None:
    """Poll ``promql`` until it equals ``want`` (scrapes are each second); the last value."""
    deadline = time.monotonic() + timeout
    value = query(url, promql)
    while value != want and time.monotonic() < deadline:
        time.sleep(0.5)
        value = query(url, promql)
    return value


def test_prometheus_counts_match_the_traffic(cluster: Cluster, prometheus: str) -> None:
    assert settled(prometheus, 'count(up{job="afm"} == 1)', 3) == 3
    assert settled(prometheus, 'count(up{job="haproxy"} == 1)', 1) == 1
    fmt = {"type": "json_schema", "json_schema": {"name": "n", "strict": True, "schema": SCHEMA}}
    sent = {"text": 0, "json_schema": 0}
    with httpx.Client(base_url=cluster.url, headers=AUTH, timeout=60) as client:
        for i in range(9):
            body: dict = {"messages": USER, "max_tokens": 12}
            if i % 3 == 0:
                body["response_format"] = fmt
            if i % 2:
                body |= {"stream": True}
                with client.stream("POST", ROUTE, json=body) as r:
                    assert r.status_code == 200
                    assert list(r.iter_lines())[-2:] == ["data: [DONE]", ""]
            else:
                assert client.post(ROUTE, json=body).status_code == 200
            sent["json_schema" if "response_format" in body else "text"] += 1
        for _ in range(2):
            assert client.post(ROUTE, json={"messages": USER, "temperature": -1}).status_code == 400
    ok = sum(sent.values())
    requests = f'sum(afm_requests_total{{endpoint="{ROUTE}",status="200"}})'
    assert settled(prometheus, requests, ok) == ok
    for mode, n in sent.items():
        by_mode = f'sum(afm_requests_total{{endpoint="{ROUTE}",status="200",mode="{mode}"}})'
        assert settled(prometheus, by_mode, n) == n
    assert settled(prometheus, f'sum(afm_requests_total{{endpoint="{ROUTE}",status="400"}})', 2) == 2
    assert settled(prometheus, "sum(afm_time_to_first_token_seconds_count)", ok) == ok
    assert settled(prometheus, 'sum(afm_time_to_first_token_seconds_count{mode="json_schema"})',
                   sent["json_schema"]) == sent["json_schema"]
    durations = f'sum(afm_request_duration_seconds_count{{endpoint="{ROUTE}"}})'
    assert settled(prometheus, durations, ok + 2) == ok + 2
    # The TTFT histogram's buckets are cumulative: +Inf holds every observation.
    assert query(prometheus, 'sum(afm_time_to_first_token_seconds_bucket{le="+Inf"})') == ok
    assert (query(prometheus, "sum(afm_completion_tokens_total)") or 0) > 0
    assert query(prometheus, "sum(afm_capacity)") == sum(
        httpx.get(f"{r.url}/health").json()["capacity"] for r in cluster.members)
    # HAProxy's exporter saw the same requests go out to the replicas (and the health checks).
    answered = 'sum(haproxy_backend_http_responses_total{proxy="replicas",code="2xx"})'
    assert (settled(prometheus, answered, ok) or 0) >= ok


def test_every_dashboard_query_runs_on_metrics_that_exist(cluster: Cluster, prometheus: str) -> None:
    """deploy/grafana-dashboard.json: each panel's PromQL is accepted by Prometheus, and every
    metric it names is exported (by a replica, or by HAProxy's exporter)."""

    dashboard = json.loads((ROOT / "deploy" / "grafana-dashboard.json").read_text())
    exported = httpx.get(f"{cluster.members[0].url}/metrics", headers=AUTH, timeout=10).text
    exported += httpx.get(f"http://127.0.0.1:{cluster.metrics_port}/metrics", timeout=10).text
    names = set(re.findall(r"^# TYPE (\w+) (\w+)", exported, re.M))
    series = {n for n, _ in names} | {f"{n}_{s}" for n, kind in names if kind == "histogram"
                                      for s in ("bucket", "count", "sum")} | {
        f"{n}_total" for n, kind in names if kind == "counter"}
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 12
    for expr in exprs:
        for metric in re.findall(r"\b((?:afm|haproxy)_\w+)", expr):
            assert metric in series, (metric, expr)
        r = httpx.get(f"{prometheus}/api/v1/query", timeout=10,
                      params={"query": expr.replace("$__rate_interval", "15s")})
        assert r.status_code == 200 and r.json()["status"] == "success", (expr, r.text)
