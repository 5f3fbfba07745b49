"""No log line carries prompt or output text without ``--log-content`` (issue 46, finding 7).

``afm-struct serve --model scripted`` in a subprocess with JSON logs; requests that hit the
grammar engine's limits (whose message dumped the generated tokens, ``Tokens: ⟦…⟧``, and the
request's grammar), a constraint that empties mid-output, special-token text, invalid bodies and
values, a plain completion.  Every line of stderr is scanned for the prompt's marker and the
output's text.  The same run with ``--log-content`` shows the scan finds them when they are
there.
"""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from server.log_redaction import redact

# This interpreter's package, run as the console script runs it.
CLI = [sys.executable, "-m", "afm_struct.cli"]
ROOT = str(Path(__file__).resolve().parents[2])  # the server package sits at the repository root
PROMPT_MARK = "pmark7f3aqv"
OUTPUT_MARK = "zqxj"  # what the limit-hitting grammar forces the model to write


def _hostile_traffic(url: str) -> None:
    user = [{"role": "user", "content": f"say {PROMPT_MARK} please"}]
    chat = f"{url}/v1/chat/completions"
    statuses = []
    # The engine's item limit, hit while forcing "zqxjzqxj…": 400 grammar_too_complex.
    for stream in (False, True):
        r = httpx.post(chat, json={"messages": user, "stream": stream,
                                   "guided_grammar": f'start: x\nx: "{OUTPUT_MARK}" x'}, timeout=60)
        statuses.append(r.status_code)
    # A language that empties after the first token (the script starts with "1").
    r = httpx.post(chat, json={"messages": user, "temperature": 0,
                               "guided_grammar": f'start: "1{OUTPUT_MARK}" x | "9"\nx: x'}, timeout=60)
    statuses.append(r.status_code)
    # Special-token text, an empty language, and plain completions ending on length.
    for fields in ({"guided_regex": f"<\\|im_end\\|>{OUTPUT_MARK}"},
                   {"guided_grammar": "root ::= x\nx ::= x"},
                   {"max_tokens": 5}, {"max_tokens": 5, "stream": True}):
        statuses.append(httpx.post(chat, json={"messages": user, **fields}, timeout=60).status_code)
    # Bodies that fail to parse or validate, with the marker in them.
    bad = [f'{{"messages": [{{"role": "user", "content": "{PROMPT_MARK}"}}], oops',
           json.dumps({"messages": user, "temperature": PROMPT_MARK}),
           json.dumps({"messages": [{"role": PROMPT_MARK, "content": PROMPT_MARK}]}),
           json.dumps({"messages": user, "response_format": {"type": "json_schema", "json_schema": {
               "name": "x", "schema": {"type": PROMPT_MARK}}}})]
    for body in bad:
        statuses.append(httpx.post(chat, content=body, headers={"content-type": "application/json"},
                                   timeout=60).status_code)
    assert 500 not in statuses, statuses


def _serve_and_log(*flags: str) -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([*CLI, "serve", "--model", "scripted:2000", "--port", str(port),
                             "--log-format", "json", "--no-store", *flags], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except httpx.HTTPError:
                assert proc.poll() is None and time.monotonic() < deadline, "server did not start"
                time.sleep(0.3)
        _hostile_traffic(f"http://127.0.0.1:{port}")
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=30)
    return stderr


@pytest.fixture(scope="module")
def logs() -> tuple[str, str]:
    return _serve_and_log(), _serve_and_log("--log-content")


def test_no_line_carries_prompt_or_output_text(logs: tuple[str, str]) -> None:
    quiet, _ = logs
    lines = quiet.splitlines()
    assert any("over the grammar engine's limits" in line for line in lines)  # the limit was hit
    assert any("failed" in line and '"level": "warning"' in line for line in lines)
    for line in lines:
        json.loads(line)  # every line is a JSON record
        assert PROMPT_MARK not in line, line
        assert OUTPUT_MARK not in line, line
        assert "⟦" not in line or "redacted" in line, line


def test_with_log_content_the_text_is_there(logs: tuple[str, str]) -> None:
    _, loud = logs
    assert PROMPT_MARK in loud
    assert OUTPUT_MARK in loud  # the engine's token dump, kept when content may be logged


def test_redact_keeps_what_an_operator_needs() -> None:
    engine = ('parser error: Too many items (limit 50000; ff_tokens)\n<state>\nTokens: ⟦secret‧ words⟧\n'
              'Stop: ParserTooComplex\n</state><grammar>\nstart: "secret"\n</grammar>')
    out = redact(f'token 46880: token " secret" doesn\'t satisfy; got \'s\'; applying \'e\'\n{engine}')
    assert "secret" not in out
    assert "Too many items (limit 50000; ff_tokens)" in out and "Stop: ParserTooComplex" in out
    assert "token 46880" in out


def test_uvicorn_text_logs_format_every_line_redacted_or_not() -> None:
    """``make serve``'s text logs: uvicorn's access formatter unpacks the record's arguments, so
    the redaction must leave them a tuple (it set them to None: every request printed a
    "--- Logging error ---" traceback instead of its access line)."""
    import io
    import logging.config

    from server.logging_json import uvicorn_log_config

    stream, errors = io.StringIO(), io.StringIO()
    config = uvicorn_log_config("text")
    for handler in config["handlers"].values():
        handler["stream"] = stream
    saved = logging.raiseExceptions, sys.stderr
    logging.config.dictConfig(config)
    sys.stderr = errors  # where logging reports a record it could not format
    try:
        access = logging.getLogger("uvicorn.access")
        access.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5", "GET", "/health", "1.1", 200)
        access.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5", "GET",
                    f'/v1/x?q=text "{PROMPT_MARK}"', "1.1", 404)
        logging.getLogger("uvicorn.error").info("got %r", PROMPT_MARK)
    finally:
        sys.stderr = saved[1]
        logging.config.dictConfig(uvicorn_log_config("text", log_content=True))
    lines = stream.getvalue().splitlines()
    assert not errors.getvalue(), errors.getvalue()
    assert len(lines) == 3, lines
    assert '"GET /health HTTP/1.1" 200' in lines[0]
    assert "chars redacted" in lines[1] and " 404" in lines[1]
    assert PROMPT_MARK not in stream.getvalue()


def test_an_access_line_formats_through_the_redaction() -> None:
    from uvicorn.logging import AccessFormatter

    from server.log_redaction import ContentRedaction

    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:5", "GET", "/v1/models?q=⟦secret⟧", "1.1", 200), None)
    assert ContentRedaction().filter(record)
    access = AccessFormatter('%(client_addr)s - "%(request_line)s" %(status_code)s', use_colors=False)
    line = access.format(record)
    assert line.startswith('127.0.0.1:5 - "GET /v1/models?q=⟦') and line.endswith('HTTP/1.1" 200 OK')
    assert "secret" not in line
