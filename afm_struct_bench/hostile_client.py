"""Sending the hostile requests of ``bench soak`` and judging what came back.

Every hostile request ends in one ``result``: ``clean_4xx`` (a JSON error envelope, no
internals in its message), ``answered`` (a 200 the request's own check accepts),
``answered_flagged`` (a 200 the check rejects, but the response says
``X-Grammar-Constraints: downgraded``), ``rejected_503`` (queue full) -- these four are
acceptable -- or ``5xx``, ``error_chunk`` (a 200 stream that reports an error), ``wrong`` (an
answer the check rejects, unflagged), ``protocol`` (a stream that breaks the SSE contract),
``unclean_4xx`` (no envelope, or internals in the message), ``refused`` (a 4xx for text that
is legitimate), ``held`` (a stalled body the server neither answered nor closed within the
stall limit), ``no_reply`` (the server closed the connection without a word), ``timeout`` and
``connection_error``.  Waits are bounded everywhere: a misbehaving server costs time, never
a hung soak.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
import uuid
from dataclasses import replace
from typing import Any

import httpx

from afm_struct.client import (
    AfmProtocolError,
    ChatResult,
    StreamAssembler,
    StreamEvent,
    result_from_completion,
)

from .hostile import MARKERS, UNIT, Target, body_bytes

OK_RESULTS = ("clean_4xx", "answered", "answered_flagged", "rejected_503")
# Words that only come from inside the server: a client-facing message must not carry them.
INTERNALS = re.compile(r"Traceback|File \"|\b(TypeError|KeyError|AttributeError|IndexError|ValueError|"
                       r"RecursionError|AssertionError|UnicodeEncodeError|LexerTooComplex)\b|object at 0x")
STATUS_LINE = re.compile(rb"^HTTP/1\.[01] (\d{3})")
READ_LIMIT = 1 << 20


def contract_violation(event: StreamEvent, finishes: int) -> str | None:
    """The SSE contract, checked event by event (the client assembler is lenient): one finish
    chunk, nothing after it but usage/profile, then [DONE]."""
    if event.kind in ("delta", "finish") and finishes:
        return f"protocol: {event.kind} after the finish chunk"
    return None


def judge_error(row: dict[str, Any], status: int, body: bytes, refusal_ok: bool = True) -> None:
    """Fill ``row`` for an HTTP error answer."""
    error: Any = None
    with contextlib.suppress(ValueError, AttributeError):
        error = json.loads(body).get("error")
    envelope = isinstance(error, dict) and bool(error.get("message")) and bool(error.get("type"))
    if envelope:
        row["error"] = f"{error.get('type')}:{error.get('code')}"
        row["param"] = error.get("param")
        row["message"] = str(error.get("message"))[:200]
    else:
        row["error"] = "no envelope"
        row["message"] = body[:200].decode(errors="replace")
    if status == 503:
        row["result"] = "rejected_503"
    elif status >= 500:
        row["result"] = "5xx"
    elif not envelope or INTERNALS.search(row["message"]):
        row["result"] = "unclean_4xx"
    else:
        row["result"] = "clean_4xx" if refusal_ok else "refused"


def judge_answer(row: dict[str, Any], spec: dict[str, Any], result: ChatResult, flagged: bool) -> None:
    """Fill ``row`` for a 200 answer: error chunk, right, flagged or wrong."""
    row["finish"] = result.finish_reason
    row["downgraded"] = flagged
    if result.usage:
        row["prompt_tokens"] = result.usage.get("prompt_tokens")
    if result.error is not None:
        row.update(result="error_chunk", error=f"chunk:{result.error.get('type')}:{result.error.get('code')}",
                   message=str(result.error.get("message"))[:200])
        return
    why = spec["check"](result)
    if why is None:
        row["result"] = "answered"
    else:
        row.update(result="answered_flagged" if flagged else "wrong", why=why)


def stream_violation(events: list[StreamEvent], result: ChatResult) -> str | None:
    """The contract violation in ``events`` (the whole stream), or None."""
    finishes = 0
    for event in events:
        broken = contract_violation(event, finishes)
        if broken:
            return broken
        finishes += event.kind == "finish"
    if result.error is None and finishes != 1:
        return f"protocol: {finishes} finish chunks"
    return None


async def _post(http: httpx.AsyncClient, spec: dict[str, Any], rid: str, row: dict[str, Any]) -> None:
    headers = {"Content-Type": "application/json", "X-Request-ID": rid}
    async with http.stream("POST", "/v1/chat/completions", content=spec["body"], headers=headers) as response:
        row["status"] = response.status_code
        if response.status_code >= 400:
            judge_error(row, response.status_code, await response.aread(), spec["refusal_ok"])
            return
        flagged = response.headers.get("x-grammar-constraints") == "downgraded"
        if not spec["stream"]:
            result = result_from_completion(json.loads(await response.aread()))
        else:
            asm = StreamAssembler()
            events: list[StreamEvent] = []
            try:
                async for text in response.aiter_text():
                    events.extend(asm.feed_text(text))
                result = asm.result if asm.done else asm.close()
            except AfmProtocolError as exc:
                row.update(result="protocol", error=f"protocol: {exc}")
                return
            broken = stream_violation(events, result)
            if broken:
                row.update(result="protocol", error=broken)
                return
    judge_answer(row, spec, result, flagged)


def final_response(data: bytes) -> bytes:
    """Raw response bytes from the final response on: interim 1xx responses before it are
    skipped, as HTTP/1.1 clients must (RFC 9110 section 15.2; the server probes a half-closed
    connection with ``100 Continue``)."""
    while (match := STATUS_LINE.match(data)) and match.group(1).startswith(b"1") \
            and b"\r\n\r\n" in data:
        data = data.partition(b"\r\n\r\n")[2]
    return data


def parse_response(data: bytes) -> tuple[int | None, dict[str, str], bytes]:
    """(status, lower-cased headers, body with chunked framing removed) of raw response bytes
    (of the final response: interim 1xx responses are skipped)."""
    data = final_response(data)
    match = STATUS_LINE.match(data)
    if not match:
        return None, {}, b""
    head, _, body = data.partition(b"\r\n\r\n")
    headers: dict[str, str] = {}
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        out, rest = b"", body
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            try:
                size = int(size_line.split(b";")[0], 16)
            except ValueError:
                break
            if size == 0:
                break
            out, rest = out + rest[:size], rest[size + 2:]
        body = out
    return int(match.group(1)), headers, body


def _complete(data: bytes) -> bool:
    """Whether raw response bytes hold a whole response (so the read can stop early)."""
    data = final_response(data)
    status, headers, _ = parse_response(data)
    if status is None or b"\r\n\r\n" not in data:
        return False
    raw_body = data.partition(b"\r\n\r\n")[2]
    if "content-length" in headers:
        return len(raw_body) >= int(headers["content-length"] or 0)
    return raw_body.endswith(b"0\r\n\r\n")


async def raw_exchange(target: Target, payload: bytes, *, half_close: bool,
                       wait_s: float) -> tuple[bytes, bool, float]:
    """Send ``payload`` on a fresh connection (then SHUT_WR if ``half_close``) and read for at
    most ``wait_s``: (bytes read, whether the server closed, seconds until the last read)."""
    start = time.perf_counter()
    reader, writer = await asyncio.wait_for(asyncio.open_connection(target.host, target.port), 10)
    data, closed = b"", False
    try:
        writer.write(payload)
        await writer.drain()
        if half_close:
            writer.write_eof()
        deadline = start + wait_s
        while len(data) < READ_LIMIT and not _complete(data):
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                break
            try:
                chunk = await asyncio.wait_for(reader.read(65536), remaining)
            except TimeoutError:
                break
            if not chunk:
                closed = True
                break
            data += chunk
    except (ConnectionError, OSError):
        closed = True
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(writer.wait_closed(), 2)
    return data, closed, time.perf_counter() - start


def request_head(target: Target, rid: str, length: int, *, close: bool) -> bytes:
    """The request line and headers of a chat completion with a ``length``-byte body."""
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {target.host}:{target.port}\r\n"
            f"Content-Type: application/json\r\nX-Request-ID: {rid}\r\nContent-Length: {length}\r\n"
            f"{'Connection: close' + chr(13) + chr(10) if close else ''}\r\n").encode()


def _judge_raw(row: dict[str, Any], spec: dict[str, Any], data: bytes, closed: bool, silent: str) -> None:
    status, headers, body = parse_response(data)
    row["status"] = status
    if status is None:
        row["result"] = "no_reply" if closed else silent
        if data:
            row["message"] = data[:120].decode(errors="replace")
        return
    if status >= 400:
        judge_error(row, status, body, spec["refusal_ok"])
        return
    flagged = headers.get("x-grammar-constraints") == "downgraded"
    try:
        if spec["stream"]:
            asm = StreamAssembler()
            events = asm.feed_text(body.decode())
            result = asm.result if asm.done else asm.close()
            broken = stream_violation(events, result)
            if broken:
                row.update(result="protocol", error=broken)
                return
        else:
            result = result_from_completion(json.loads(body))
    except (AfmProtocolError, ValueError, UnicodeDecodeError) as exc:
        row.update(result="protocol", error=f"protocol: {str(exc)[:120]}")
        return
    judge_answer(row, spec, result, flagged)


async def send_hostile(http: httpx.AsyncClient, spec: dict[str, Any], target: Target, *,
                       timeout_s: float, rid: str | None = None) -> dict[str, Any]:
    """Send one hostile request the way its spec says; one row of results."""
    rid = rid or f"hostile-{uuid.uuid4().hex[:12]}"
    row: dict[str, Any] = {"kind": spec["kind"], "variant": spec["variant"], "hostile": True, "rid": rid,
                           "stream": spec["stream"], "status": None}
    body = spec["body"]
    try:
        if spec["transport"] == "http":
            await _post(http, spec, rid, row)
        elif spec["transport"] == "stalled":
            sent = body[:len(body) // 2] if spec["variant"] == "half" else b""
            data, closed, waited = await raw_exchange(
                target, request_head(target, rid, len(body), close=False) + sent, half_close=False,
                wait_s=target.stall_limit_s)
            row["answered_after_s"] = round(waited, 2)
            _judge_raw(row, spec, data, closed, silent="held")
        else:
            data, closed, waited = await raw_exchange(
                target, request_head(target, rid, len(body), close=True) + body, half_close=True,
                wait_s=timeout_s)
            _judge_raw(row, spec, data, closed, silent="timeout")
    except (httpx.TimeoutException, TimeoutError) as exc:
        row.update(result="timeout", error=f"{type(exc).__name__}")
    except (httpx.HTTPError, OSError, ValueError) as exc:
        row.update(result="connection_error", error=f"{type(exc).__name__}: {str(exc)[:120]}")
    return row


# -- calibration -------------------------------------------------------------------------------

async def prompt_tokens(http: httpx.AsyncClient, content: str, timeout_s: float) -> tuple[int | None, str]:
    """(prompt tokens the server counts for one user message, or None; the error message)."""
    body = body_bytes({"messages": [{"role": "user", "content": content}], "max_tokens": 1})
    try:
        response = await http.post("/v1/chat/completions", content=body, timeout=timeout_s,
                                   headers={"Content-Type": "application/json"})
        doc = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    if response.status_code != 200:
        return None, str((doc.get("error") or {}).get("message", response.status_code))
    return (doc.get("usage") or {}).get("prompt_tokens"), ""


async def calibrate(http: httpx.AsyncClient, target: Target, *, context: int | None,
                    timeout_s: float) -> tuple[Target, dict[str, Any]]:
    """``target`` with the server's token counts (and its context, from the overflow error of a
    prompt of ``huge_prompt_bytes``, unless ``context`` is given); and what was found how."""
    info: dict[str, Any] = {}
    base, _ = await prompt_tokens(http, "x", timeout_s)
    more, _ = await prompt_tokens(http, "x" + UNIT * 200, timeout_s)
    if base is not None and more is not None and more > base:
        target = replace(target, base_tokens=base, tokens_per_unit=(more - base) / 200)
        info["tokens"] = "calibrated"
    else:
        info["tokens"] = "default (the server did not report usage)"
    if context is None:
        units = target.huge_prompt_bytes // len(UNIT)
        _, message = await prompt_tokens(http, "x" + UNIT * units, timeout_s)
        found = re.search(r"context\D{0,40}?(\d{3,})", message)
        if found:
            target = replace(target, context_tokens=int(found.group(1)))
            info["context"] = "from the overflow error"
        else:
            info["context"] = f"default (overflow error said: {message[:120]!r})"
    else:
        target = replace(target, context_tokens=context)
        info["context"] = "given"
    info.update(context_tokens=target.context_tokens, base_tokens=target.base_tokens,
                tokens_per_unit=target.tokens_per_unit)
    return target, info


async def control_token_probe(http: httpx.AsyncClient, timeout_s: float, repeats: int = 8) -> dict[str, Any]:
    """Prompt tokens per special-token string typed as text: one means the string became a
    control token (forged), plain text costs several."""
    base, _ = await prompt_tokens(http, "x", timeout_s)
    cost: dict[str, float | None] = {}
    for marker in MARKERS:
        n, _ = await prompt_tokens(http, "x" + marker * repeats, timeout_s)
        cost[marker] = None if n is None or base is None else (n - base) / repeats
    return {"tokens_per_marker": cost,
            "forged": sorted(m for m, c in cost.items() if c is not None and c <= 1.5)}
