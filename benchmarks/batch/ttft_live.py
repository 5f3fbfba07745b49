"""Live TTFT on an idle server against the same server while a batch runs, measured as a user
sees it: ``afm-struct serve`` in its own process, and a probe client in this one that holds one
connection (no client built per probe, no server thread sharing the probe's GIL).

``throughput.py`` ran the server in the probing process: there the probe's own thread waited for
the GIL that the batch's rows held, and each probe built an httpx client (a TLS context, ~36 ms
of CPU) inside its timing; this script measures the server alone.

Method: blocks of ``--block`` streamed chat probes, one after another, alternate between idle
(no batch) and busy (a batch of ``--lines`` extraction lines created and given ``--settle`` s to
fill its rows, the probes sent while it runs, then cancelled and waited out), ``--rounds``
times, so the machine's drifting load falls on both sides alike.  Each probe records the
client's time to the first content chunk and the server's own ``ttft_s`` from its JSON request
log (arrival to first token).  Reports p50/p90 of each and the busy/idle ratios, and the batch
lines finished per second during the busy blocks.

    .venv/bin/python benchmarks/batch/ttft_live.py --out RUN.json [-- extra serve options]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import openai

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                           "city": {"type": "string"}},
          "required": ["name", "age", "city"], "additionalProperties": False}
ENDED = ("cancelled", "completed", "failed")
PROBE = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 16, "stream": True}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """``afm-struct serve`` in a child process; its JSON request log read by a thread."""

    def __init__(self, args: list[str], store: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        exe = Path(sys.executable).with_name("afm-struct")
        cmd = [str(exe), "serve", "--host", "127.0.0.1", "--port", str(self.port),
               "--responses-store", str(store), "--log-format", "json", *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.records: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}")
            time.sleep(0.2)
        raise RuntimeError("server did not start")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                try:
                    self.records.append(json.loads(line))
                except ValueError:
                    pass

    def cpu_seconds(self) -> float:
        """The server process's user + sys CPU so far (Linux /proc)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def batch_text(lines: int) -> bytes:
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}}
    out = []
    for i in range(lines):
        body = {"messages": [{"role": "user", "content": f"Extract the person from document {i}: "
                                                         "Ada Lovelace, 36, lived in London."}],
                "max_tokens": 40, "response_format": fmt}
        out.append(json.dumps({"custom_id": f"doc-{i}", "method": "POST",
                               "url": "/v1/chat/completions", "body": body}))
    return ("\n".join(out) + "\n").encode()


def probe(http: httpx.Client, url: str) -> tuple[float, str | None]:
    """Client TTFT of one streamed probe, and its request ID (to find the server's record)."""
    started = time.perf_counter()
    ttft = None
    with http.stream("POST", f"{url}/v1/chat/completions", json=PROBE, timeout=60) as r:
        request_id = r.headers.get("x-request-id")
        for line in r.iter_lines():
            if ttft is None and line.startswith("data: ") and '"content":"' in line.replace(" ", ""):
                ttft = time.perf_counter() - started
    if ttft is None:
        raise RuntimeError("a probe got no content")
    return ttft, request_id


def summary(values: list[float]) -> dict[str, float]:
    ms = sorted(v * 1000 for v in values)
    return {"n": len(ms), "p50_ms": round(statistics.median(ms), 1),
            "p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 1), "mean_ms": round(statistics.fmean(ms), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="scripted:200", help='"" serves the embedded model')
    parser.add_argument("--max-active", type=int, default=8)
    parser.add_argument("--lines", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--block", type=int, default=5)
    parser.add_argument("--settle", type=float, default=1.0, help="seconds a new batch gets to fill its rows")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("serve_args", nargs="*", help="more `afm-struct serve` options (after --)")
    args = parser.parse_args()
    text = batch_text(args.lines)
    client_ttft: dict[str, list[float]] = {"idle": [], "busy": []}
    ids: dict[str, list[str]] = {"idle": [], "busy": []}
    lines_done, busy_seconds = 0, 0.0
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        model = ["--model", args.model] if args.model else []
        server = ServerProcess([*model, "--max-active", str(args.max_active), *args.serve_args],
                               Path(tmp) / "store.sqlite3")
        try:
            sdk = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
            file_id = sdk.files.create(file=("in.jsonl", io.BytesIO(text)), purpose="batch").id
            cpu_start = server.cpu_seconds()
            with httpx.Client() as http:
                probe(http, server.url)  # the app's first request builds its routes' contexts
                for _ in range(args.rounds):
                    for side in ("idle", "busy"):
                        batch_id = None
                        if side == "busy":
                            batch_id = sdk.batches.create(input_file_id=file_id, completion_window="24h",
                                                          endpoint="/v1/chat/completions").id
                            time.sleep(args.settle)
                            before = sdk.batches.retrieve(batch_id).request_counts.completed
                            started = time.perf_counter()
                        for _ in range(args.block):
                            ttft, request_id = probe(http, server.url)
                            client_ttft[side].append(ttft)
                            if request_id:
                                ids[side].append(request_id)
                            time.sleep(0.05)
                        if batch_id is not None:
                            busy_seconds += time.perf_counter() - started
                            lines_done += sdk.batches.retrieve(batch_id).request_counts.completed - before
                            sdk.batches.cancel(batch_id)
                            while sdk.batches.retrieve(batch_id).status not in ENDED:
                                time.sleep(0.1)
            cpu = server.cpu_seconds() - cpu_start
        finally:
            server.stop()
    by_id = {r.get("request_id"): r for r in server.records if r.get("ttft_s") is not None}
    server_ttft = {side: [by_id[i]["ttft_s"] for i in ids[side] if i in by_id] for side in ids}
    result: dict[str, Any] = {
        "command": " ".join(sys.argv), "machine": platform.platform(), "model": args.model,
        "max_active": args.max_active, "lines": args.lines, "rounds": args.rounds, "block": args.block,
        "client_ttft_idle": summary(client_ttft["idle"]), "client_ttft_busy": summary(client_ttft["busy"]),
        "batch_lines_per_s_during_probes": round(lines_done / busy_seconds, 2) if busy_seconds else None,
        "server_cpu_s": round(cpu, 1), "load_average": [round(load_start, 2), round(os.getloadavg()[0], 2)],
    }
    for name in ("client", "server"):
        values = client_ttft if name == "client" else server_ttft
        if values["idle"] and values["busy"]:
            idle, busy = summary(values["idle"]), summary(values["busy"])
            result[f"{name}_ttft_idle"], result[f"{name}_ttft_busy"] = idle, busy
            result[f"{name}_ratio_p50"] = round(busy["p50_ms"] / idle["p50_ms"], 2)
            result[f"{name}_ratio_p90"] = round(busy["p90_ms"] / idle["p90_ms"], 2)
    out = json.dumps(result, indent=2)
    print(out)
    if args.out is not None:
        args.out.write_text(out + "\n")


if __name__ == "__main__":
    main()
