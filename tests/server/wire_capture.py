"""Recording a server's exact wire output: transcripts of HTTP exchanges, for golden files.

A :class:`Transcript` holds, per exchange, the request as sent (method, path, the headers the
test set, the body bytes) and the response as received (status, headers but ``date``, the body's
exact bytes).  Only what is random is normalized, and where it is made: the server's
:class:`FixedIds` replaces its id source (response and call ids count up from 1 per case, a fixed
``created``), and the profile objects (measurements of this machine: timings, memory, rates)
have their measured values replaced by a placeholder (and the content-length with them), the
rest of the bytes as sent.

:class:`GatedModel` is the scripted model with a hold: once a sequence has generated
``hold_at`` tokens, the forward pass waits (the scheduler thread with it) until released, so a
cancel, a disconnect or a full queue happens at the same token every run.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx

from afm_struct.models import LoadedModel
from afm_struct.models.loader import ModelInfo
from afm_struct.testing import Script, ScriptedBatch, ScriptedModel

CREATED = 1700000000
MEASURED = "<measured>"
# Profile fields that are measurements of this machine and this run (the rest is exact).
_MEASURED_PROFILE = ("chip", "blas", "memory", "timing", "prefill_tok_s", "decode_tok_s", "power_w",
                     "estimated_bandwidth_gbps", "unavailable", "samples", "sample_count")


class FixedIds:
    """The server's id source, counting: ``chatcmpl-0000…0001``, ``call_0000…0002``, ..."""

    def __init__(self) -> None:
        self.count = 0

    def reset(self) -> None:
        """Start counting again (each case starts from 1)."""
        self.count = 0

    def new_id(self, prefix: str) -> str:
        """The next id."""
        self.count += 1
        return f"{prefix}{self.count:024x}"

    def created(self) -> int:
        """A fixed time."""
        return CREATED


class GatedModel(ScriptedModel):
    """A scripted model that holds its forward pass once a sequence has generated
    :attr:`hold_at` tokens (once), until :meth:`open` is called."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hold_at: int | None = None
        self.holding = threading.Event()
        self._release = threading.Event()

    def hold(self, at: int) -> None:
        """Hold the next pass after which a sequence has generated ``at`` tokens."""
        self._release.clear()
        self.holding.clear()
        self.hold_at = at

    def open(self) -> None:
        """Let the held pass (and every later one) go on."""
        self.hold_at = None
        self._release.set()

    def __call__(self, inputs: Any, cache: Any = None) -> Any:
        out = super().__call__(inputs, cache)
        if self.hold_at is not None:
            rows = cache[0].rows if isinstance(cache[0], ScriptedBatch) else [cache[0]]
            if any(c.prompt_len is not None and c.offset - c.prompt_len >= self.hold_at for c in rows):
                self.holding.set()
                if not self._release.wait(30):
                    raise RuntimeError("a gated pass was never released")
        return out


def gated_loaded_model(tokenizer: Any, script: Script) -> LoadedModel:
    """A :class:`LoadedModel` over a :class:`GatedModel` (as ``scripted_loaded_model``)."""
    info = ModelInfo(id="scripted", path="<scripted>", source="scripted", context_length=8192,
                     weights="none", weight_bytes=0, device="cpu", load_seconds=0.0)
    return LoadedModel(model=GatedModel(tokenizer, script), tokenizer=tokenizer, info=info)  # type: ignore[arg-type]


def compact(value: Any) -> bytes:
    """JSON as the server writes it (compact, UTF-8)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _measured(value: Any) -> Any:
    """The profile object with this machine's measurements replaced by :data:`MEASURED`."""
    if not isinstance(value, dict):
        return value
    return {k: MEASURED if k in _MEASURED_PROFILE else _measured(v) for k, v in value.items()}


def normalize_profiles(body: bytes) -> bytes:
    """``body`` (SSE or one JSON document) with the profile objects' measurements replaced; each
    event is checked to re-encode to its own bytes first, so nothing else can change."""
    keys = ("afm_profile", "afm_profile_extended")
    if body.startswith(b"data: "):
        events = body.split(b"\n\n")
        out = []
        for raw in events:
            if raw.startswith(b"data: {"):
                doc = json.loads(raw[6:])
                assert compact(doc) == raw[6:], "an SSE event does not re-encode to its bytes"
                if any(k in doc for k in keys):
                    raw = b"data: " + compact({k: _measured(v) if k in keys else v for k, v in doc.items()})
            out.append(raw)
        return b"\n\n".join(out)
    doc = json.loads(body)
    assert compact(doc) == body, "the body does not re-encode to its bytes"
    return compact({k: _measured(v) if k in keys else v for k, v in doc.items()})


class Transcript:
    """The exchanges of one case, rendered as text (bodies as their exact bytes)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.parts: list[bytes] = []

    def note(self, text: str) -> None:
        """A line saying what the case did between exchanges (a hold, a disconnect)."""
        self.parts.append(f"# {text}\n".encode())

    def request(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> None:
        """Record a request as sent."""
        lines = [f"> {method} {path}"] + [f"> {k}: {v}" for k, v in sorted(headers.items())]
        self.parts.append(("\n".join(lines) + "\n").encode())
        if body is not None:
            self.parts.append(b"> " + body + b"\n")

    def response(self, response: httpx.Response, body: bytes, *, profile: bool = False) -> None:
        """Record a response: status, headers (but ``date``) and the body's bytes."""
        if profile:
            body = normalize_profiles(body)
        lines = [f"< {response.status_code}"] + [
            f"< {k}: {MEASURED if profile and k.lower() == 'content-length' else v}"
            for k, v in response.headers.multi_items() if k.lower() != "date"]
        lines.append(f"< body: {len(body)} bytes")
        self.parts.append(("\n".join(lines) + "\n").encode() + body + b"\n=====\n")

    def post(self, path: str, body: Any, *, headers: dict[str, str] | None = None,
             profile: bool = False, raw: bytes | None = None) -> httpx.Response:
        """POST ``body`` (compact JSON, or ``raw`` bytes) and record the exchange whole."""
        data = raw if raw is not None else (compact(body) if body is not None else None)
        sent = {**({"content-type": "application/json"} if data is not None else {}), **(headers or {})}
        self.request("POST", path, data, sent)
        with httpx.stream("POST", self.url + path, content=data, headers=sent, timeout=60) as response:
            content = response.read()
        self.response(response, content, profile=profile)
        return response

    def render(self) -> bytes:
        """The transcript's bytes."""
        return b"".join(self.parts)


class EventReader:
    """Reads a streaming response's SSE events a few at a time, keeping what arrived early."""

    def __init__(self, response: httpx.Response) -> None:
        self._raw = response.iter_raw()
        self._buffer = b""

    def events(self, count: int) -> bytes:
        """The next ``count`` events' bytes (blocks until they arrived)."""
        while self._buffer.count(b"\n\n") < count:
            self._buffer += next(self._raw)
        cut = 0
        for _ in range(count):
            cut = self._buffer.index(b"\n\n", cut) + 2
        head, self._buffer = self._buffer[:cut], self._buffer[cut:]
        return head

    def rest(self) -> bytes:
        """Everything else, to the end of the body."""
        return self._buffer + b"".join(self._raw)
