"""A batch's input and output lines, pure: reading an uploaded JSONL file and one request line,
and writing OpenAI's output line (``id``, ``custom_id``, ``response: {status_code,
request_id, body}``, ``error``).

The file as a whole is checked when it is uploaded (UTF-8, not empty, at most
:data:`MAX_LINES` lines: a 400 naming the line).  Each line is checked again when a batch is
made of it, and a bad one (not JSON, no ``custom_id``, an unknown ``url``) does not stop the
batch: it is listed in the batch's ``errors`` with its line number and answered in the error
file, as every other line is answered by its endpoint.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

from afm_struct.errors import AfmError, InvalidRequestError

# The endpoints a batch runs (OpenAI's batch endpoints that this server serves).
ENDPOINTS = ("/v1/chat/completions", "/v1/responses", "/v1/completions")
# OpenAI's bound on the requests of one batch.
MAX_LINES = 50_000
# The batch object's ``errors`` lists at most this many bad lines (the error file has them all).
MAX_LISTED_ERRORS = 100


@dataclass(frozen=True)
class RequestLine:
    """One line of a batch's input: its request, or why it is not one (``problem``)."""

    number: int  # 1-based, as an editor shows it
    custom_id: str | None
    url: str | None
    body: dict[str, Any] | None
    problem: InvalidRequestError | None = None


def split_lines(data: bytes) -> list[str]:
    """The non-blank lines of an uploaded JSONL file; a 400 naming the line when the file is
    not UTF-8, holds no line, or holds more than :data:`MAX_LINES`."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise InvalidRequestError(f"file: line {line} is not UTF-8 (byte 0x{data[exc.start]:02x}); "
                                  "a batch file is UTF-8 JSONL", param="file", code="invalid_file") from None
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise InvalidRequestError("file: the file holds no line; a batch file is one JSON request per line",
                                  param="file", code="invalid_file")
    if len(lines) > MAX_LINES:
        raise InvalidRequestError(f"file: {len(lines):,} lines; a batch holds at most {MAX_LINES:,} "
                                  "requests: split the file", param="file", code="invalid_file")
    return lines


def read_line(text: str, number: int) -> RequestLine:
    """Line ``number`` of a batch input (``{custom_id, method, url, body}``), or its problem."""
    def bad(message: str, code: str = "invalid_line") -> RequestLine:
        custom = data.get("custom_id") if isinstance(data, dict) else None
        return RequestLine(number, custom if isinstance(custom, str) else None, None, None,
                           InvalidRequestError(f"line {number}: {message}", code=code))

    data: Any = None
    try:
        data = json.loads(text)
    except ValueError as exc:
        return bad(f"not JSON ({exc})", "invalid_json")
    if not isinstance(data, dict):
        return bad("not a JSON object; each line is {\"custom_id\", \"method\", \"url\", \"body\"}")
    custom_id = data.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return bad("custom_id: a non-empty string is required", "missing_required_parameter")
    if data.get("method", "POST") != "POST":
        return bad(f"method: {data.get('method')!r}; batch requests are POST")
    url, body = data.get("url"), data.get("body")
    if not isinstance(url, str):
        return bad("url: a string is required (e.g. \"/v1/chat/completions\")", "missing_required_parameter")
    if not isinstance(body, dict):
        return bad("body: a JSON object is required (the request the endpoint takes)",
                   "missing_required_parameter")
    return RequestLine(number, custom_id, url, body)


def duplicate_ids(lines: list[RequestLine]) -> InvalidRequestError | None:
    """The 400 for a file whose lines share a ``custom_id`` (each names one line's result)."""
    seen: dict[str, int] = {}
    for line in lines:
        if line.custom_id is None:
            continue
        first = seen.setdefault(line.custom_id, line.number)
        if first != line.number:
            return InvalidRequestError(f"input_file_id: line {line.number} repeats the custom_id "
                                       f"{line.custom_id!r} of line {first}; each line needs its own",
                                       param="input_file_id", code="duplicate_custom_id")
    return None


def listed_error(line: RequestLine, problem: InvalidRequestError | None = None) -> dict[str, Any]:
    """A bad line as the batch object's ``errors.data`` lists it (``problem``: its own, by default)."""
    problem = problem or line.problem
    assert problem is not None
    return {"code": problem.code, "message": problem.message, "param": None, "line": line.number}


def refusal(line: RequestLine, endpoint: str) -> InvalidRequestError | None:
    """Why ``line`` cannot run in a batch of ``endpoint`` (None: it can): its own problem, or a
    ``url`` that is not the batch's endpoint.  A batch none of whose lines can run fails at once."""
    if line.problem is not None or line.url == endpoint:
        return line.problem
    if line.url in ENDPOINTS:
        return InvalidRequestError(f"line {line.number}: url {line.url!r} is not this batch's endpoint "
                                   f"{endpoint!r}; a batch runs one endpoint", code="mismatched_url")
    return InvalidRequestError(f"line {line.number}: url {line.url!r} is not a batch endpoint; send "
                               + ", ".join(ENDPOINTS), code="invalid_url")


def output_line(custom_id: str | None, *, status_code: int | None = None, request_id: str | None = None,
                body: dict[str, Any] | None = None, error: AfmError | None = None) -> dict[str, Any]:
    """One line of the output or error file: the endpoint's answer (``status_code``, ``body``),
    or ``error`` for a line that never reached an endpoint."""
    response = None if status_code is None else {"status_code": status_code, "request_id": request_id,
                                                 "body": body}
    return {"id": f"batch_req_{secrets.token_hex(12)}", "custom_id": custom_id, "response": response,
            "error": None if error is None else {"code": error.code, "message": error.message}}
