"""What every protocol's wire shares: SSE framing and the JSON error bodies.

Pure functions: values to bytes or dicts, no I/O and no state.  An event is
``data: <compact JSON>`` and a blank line, preceded by ``event: <type>`` when the protocol names
its events (the Responses API streams ``event: response.output_text.delta``; Chat Completions
sends bare ``data:`` lines and a final ``data: [DONE]``).  Each protocol's shapes live in its
encoder (``server/chat/encoder.py``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from afm_struct.errors import AfmError

from .messages.errors import anthropic_error, is_messages_path

DONE = b"data: [DONE]\n\n"


# Characters JSON may hold raw that Python's str.splitlines (and so httpx's iter_lines, which
# httpx-sse reads events with) takes for line ends: escaped, the event stays one line for them.
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})
# One encoder for every event: ``json.dumps`` with options builds a new one per call.  (With the
# check below, ~40 % of an event's encoding at 32 streams; the bytes are the same, issue 40.)
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def json_text(value: Any) -> str:
    """``value``'s compact JSON as an event carries it: no character any line splitter reads
    as a line end.  Character by character, so a part of a value encodes as it does inside it
    (server/chat/content_frames.py relies on it)."""
    text = _JSON.encode(value)
    if "\u2028" in text or "\u2029" in text or "\x85" in text:  # rare: a scan is ~100x cheaper
        text = text.translate(_LINE_BREAKS)
    return text


def encode_event(payload: Mapping[str, Any], *, event: str | None = None) -> bytes:
    """One SSE event: an optional ``event: <type>`` line, ``data: <compact JSON>`` and a blank
    line (the JSON holds no character any line splitter reads as a line end)."""
    data = b"data: " + json_text(payload).encode() + b"\n\n"
    if event is None:
        return data
    if not event or any(ch in event for ch in "\r\n"):
        raise ValueError(f"an SSE event type is one non-empty line, not {event!r}")
    return b"event: " + event.encode() + b"\n" + data


def error_body(err: AfmError) -> dict[str, str | None]:
    """The ``error`` object: message, type, param, code."""
    return err.to_dict()


def error_envelope(err: AfmError) -> dict[str, Any]:
    """The JSON body of an HTTP error on the OpenAI routes: ``{"error": {...}}``."""
    return {"error": error_body(err)}


# Ollama's API: its clients read an error as ``{"error": "message"}`` (the envelope's object
# would reach their users as a dict, or as a failure to parse it).
OLLAMA_API_PREFIX = "/api/"


def error_json(err: AfmError, path: str) -> dict[str, Any]:
    """The JSON body of ``err`` answering a request for ``path``: Ollama's
    ``{"error": "message"}`` under :data:`OLLAMA_API_PREFIX`, Anthropic's ``{"type": "error",
    "error": {...}}`` on the Messages API's paths, else :func:`error_envelope`.  Every error
    body goes through here, whichever layer answers (middleware or route)."""
    if path.startswith(OLLAMA_API_PREFIX):
        return {"error": err.message}
    if is_messages_path(path):
        return anthropic_error(err)
    return error_envelope(err)
