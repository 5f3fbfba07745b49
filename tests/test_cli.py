"""The ``afm-struct`` command line, run as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ENV = dict(os.environ, TRANSFORMERS_NO_ADVISORY_WARNINGS="1")


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "afm_struct.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=ENV)


def test_version():
    out = cli("--version")
    assert out.returncode == 0
    assert out.stdout.strip().startswith("afm-struct 0.")


@pytest.mark.model
def test_generate_streams_an_answer():
    out = cli("generate", "What is the capital of France?", "--max-tokens", "30", "--verbose")
    assert out.returncode == 0, out.stderr
    assert "Paris" in out.stdout
    assert "BLAS openblas" in out.stderr or "BLAS mkl" in out.stderr
    assert "decode=" in out.stderr


@pytest.mark.model
def test_generate_from_messages_file(tmp_path):
    f = tmp_path / "m.json"
    f.write_text(json.dumps([{"role": "system", "content": "Answer in one word."},
                             {"role": "user", "content": "What is the capital of France?"}]))
    out = cli("generate", "--messages", str(f), "--max-tokens", "20")
    assert out.returncode == 0, out.stderr
    assert "Paris" in out.stdout


def test_missing_model_is_one_line_error(tmp_path):
    out = cli("generate", "hi", "--model", str(tmp_path / "missing.gguf"))
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    expected = f"afm-struct: error: GGUF file not found: {tmp_path}/missing.gguf"
    assert out.stderr.strip().splitlines() == [expected]


def test_bad_messages_file(tmp_path):
    f = tmp_path / "m.json"
    f.write_text("{not json")
    out = cli("generate", "--messages", str(f))
    assert out.returncode == 1
    assert "cannot read messages" in out.stderr and "Traceback" not in out.stderr


def test_prompt_too_long_for_context(tmp_path):
    out = cli("generate", "word " * 9000, "--max-tokens", "5")
    assert out.returncode == 1
    assert "maximum context length is 8192 tokens" in out.stderr and "Traceback" not in out.stderr
