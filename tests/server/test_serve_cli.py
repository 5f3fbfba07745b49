"""``afm-struct serve``: argument defaults, a missing model, and a real start-up."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from afm_struct.cli import build_parser

EXE = str(Path(sys.executable).with_name("afm-struct"))


def test_serve_defaults() -> None:
    args = build_parser().parse_args(["serve"])
    assert (args.host, args.port, args.model, args.log_level) == ("127.0.0.1", 9999, None, "info")
    assert args.max_queue >= 0 and args.max_active >= 1
    args = build_parser().parse_args(["serve", "--port", "1234", "--max-queue", "2", "--max-active", "1"])
    assert (args.port, args.max_queue, args.max_active) == (1234, 2, 1)


def test_missing_model_is_a_one_line_error_and_exit_1(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    proc = subprocess.run([EXE, "serve", "--model", str(missing)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and str(missing) in errors[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.model
def test_serve_starts_and_reports_model_device_and_blas() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([EXE, "serve", "--port", str(port), "--log-level", "warning"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except httpx.HTTPError:
                assert proc.poll() is None and time.monotonic() < deadline, "server did not start"
                time.sleep(0.3)
        assert health.json()["model"] == "SmolLM2-135M-Instruct"
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=30)
    assert "SmolLM2-135M-Instruct" in stderr
    assert "MLX device" in stderr and "BLAS" in stderr
    assert "mapping weights" in stderr  # load progress was shown
