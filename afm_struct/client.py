"""A consumer of afm-struct's chat-completion streams that follows the contract's client rules.

Events are kept in order; ``content`` and ``reasoning_content`` are separate channels; tool calls
are merged by ``index`` keeping the first non-null ``id``, ``type`` and ``function.name`` and
appending every ``arguments`` fragment; each event is dispatched on its top-level keys
(``afm_profile``, ``afm_profile_extended``, ``error``) before being read as an OpenAI chunk;
``data: [DONE]`` terminates the stream.  The parsing is a pure incremental state machine
(:class:`SSEDecoder` + :class:`StreamAssembler`) shared by the sync and async clients::

    AfmClientError
    ├── AfmHTTPError      (an HTTP error before the stream: status and the error envelope)
    ├── AfmStreamError    (an error-marked chunk arrived after streaming began)
    └── AfmProtocolError  (the stream broke the contract: bad JSON, mixed ids, no [DONE])
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from .library.partial_models import AsyncEventStream, EventStream
from .tools.call_deltas import FragmentError, ToolCall, ToolCallAssembler

__all__ = [
    "AfmClientError",
    "AfmHTTPError",
    "AfmProtocolError",
    "AfmStreamError",
    "AsyncClient",
    "ChatResult",
    "Client",
    "EventStream",
    "SSEDecoder",
    "StreamAssembler",
    "StreamEvent",
    "ToolCall",
    "affinity_key",
    "build_request",
]

PROFILE_KEYS = ("afm_profile", "afm_profile_extended")
ENFORCEMENT_KEY = "afm_enforcement"


class AfmClientError(Exception):
    """Base class of the client's errors."""


class AfmHTTPError(AfmClientError):
    """A non-2xx response: the status plus the fields of the JSON error envelope."""

    def __init__(self, status: int, error: dict[str, Any], *, retry_after: float | None = None,
                 request_id: str | None = None) -> None:
        self.status = status
        self.error = error
        self.message = str(error.get("message") or f"HTTP {status}")
        self.type = error.get("type")
        self.param = error.get("param")
        self.code = error.get("code")
        self.retry_after = retry_after
        self.request_id = request_id
        super().__init__(f"HTTP {status} {self.type}: {self.message}")


class AfmStreamError(AfmClientError):
    """The stream carried an error chunk (the HTTP status was already 200)."""

    def __init__(self, error: dict[str, Any]) -> None:
        self.error = error
        self.message = str(error.get("message"))
        self.type = error.get("type")
        self.code = error.get("code")
        super().__init__(f"stream error {self.type}: {self.message}")


class AfmProtocolError(AfmClientError):
    """The byte stream did not follow the contract."""


@dataclass
class StreamEvent:
    """One logical event: ``delta`` (dict), ``finish`` (reason), ``usage`` (dict), ``profile``
    (dict, key in ``profile_key``), ``enforcement`` (the report, ``X-AFM-Enforcement``),
    ``partial`` (the content's value so far) or ``partial_arguments`` (``{"index", "value"}``:
    a call's arguments so far; both with ``partial=True``), ``error`` (dict) or ``done`` (the
    :class:`ChatResult`)."""

    kind: str
    data: Any = None
    profile_key: str | None = None


@dataclass
class ChatResult:
    """Everything a stream (or a non-streaming completion) said."""

    id: str | None = None
    model: str | None = None
    created: int | None = None
    role: str | None = None
    content: str = ""
    reasoning_content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    profile: dict[str, Any] | None = None
    profile_key: str | None = None
    error: dict[str, Any] | None = None
    request_id: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    chunks: int = 0
    # logprobs.content entries in order (requests with logprobs: true), else None
    logprobs: list[dict[str, Any]] | None = None
    # The enforcement report (enforcement=True: the X-AFM-Enforcement header), else None
    enforcement: dict[str, Any] | None = None

    def raise_for_error(self) -> ChatResult:
        """Raise :class:`AfmStreamError` if the stream reported an error; else return self."""
        if self.error is not None:
            raise AfmStreamError(self.error)
        return self

    def json(self) -> Any:
        """``content`` parsed as JSON (for structured output)."""
        return json.loads(self.content)


class SSEDecoder:
    """Incremental SSE parser: text in, the ``data`` payloads of complete events out."""

    def __init__(self) -> None:
        self._buf = ""
        self._data: list[str] = []

    def feed(self, text: str) -> list[str]:
        """Add decoded text; return the data of every event completed by it."""
        self._buf += text
        out: list[str] = []
        while True:
            cut = min((i for i in (self._buf.find("\n"), self._buf.find("\r")) if i >= 0), default=-1)
            if cut < 0:
                return out
            line = self._buf[:cut]
            skip = 2 if self._buf[cut:cut + 2] == "\r\n" else 1
            if self._buf[cut] == "\r" and cut + 1 == len(self._buf):
                return out  # a CR at the end might be half of CRLF: wait for more
            self._buf = self._buf[cut + skip:]
            if not line:
                if self._data:
                    out.append("\n".join(self._data))
                    self._data = []
            elif line.startswith("data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(" ") else value)
            # comments (":") and event/id/retry fields carry nothing for chat completions

    def close(self) -> list[str]:
        """Flush an event left unterminated at the end of the body."""
        out = self.feed("\n\n") if (self._buf or self._data) else []
        self._buf, self._data = "", []
        return out


class StreamAssembler:
    """Pure state machine: SSE text or event payloads in, :class:`StreamEvent` s and a result out."""

    def __init__(self) -> None:
        self.result = ChatResult()
        self.done = False
        self._decoder = SSEDecoder()
        # Calls land in the result's own list, in order of first appearance.
        self._calls = ToolCallAssembler(calls=self.result.tool_calls)

    def feed_text(self, text: str) -> list[StreamEvent]:
        """Feed raw SSE text (any fragmentation)."""
        events: list[StreamEvent] = []
        for data in self._decoder.feed(text):
            events.extend(self.feed_data(data))
        return events

    def feed_data(self, data: str) -> list[StreamEvent]:
        """Feed one event's data payload."""
        if self.done:
            raise AfmProtocolError(f"data after [DONE]: {data[:80]!r}")
        if data.strip() == "[DONE]":
            self.done = True
            return [StreamEvent("done", self.result)]
        try:
            obj = json.loads(data)
        except ValueError as exc:
            raise AfmProtocolError(f"an event is not JSON: {data[:80]!r}") from exc
        if not isinstance(obj, dict):
            raise AfmProtocolError(f"an event is not a JSON object: {data[:80]!r}")
        # Dispatch on top-level keys first: AFM extensions are not chunks.
        for key in PROFILE_KEYS:
            if key in obj:
                self.result.profile, self.result.profile_key = obj[key], key
                return [StreamEvent("profile", obj[key], profile_key=key)]
        if ENFORCEMENT_KEY in obj:
            self.result.enforcement = obj[ENFORCEMENT_KEY]
            return [StreamEvent("enforcement", obj[ENFORCEMENT_KEY])]
        self._check_identity(obj)
        self.result.chunks += 1
        events: list[StreamEvent] = []
        if obj.get("error") is not None:
            # The delta text of an error chunk is for plain clients; careful ones keep it out.
            self.result.error = obj["error"]
            self.result.finish_reason = "error"
            return [StreamEvent("error", obj["error"])]
        choices = obj.get("choices")
        if choices is None:
            raise AfmProtocolError(f"a chunk has no choices: {data[:80]!r}")
        if obj.get("usage") is not None:
            self.result.usage = obj["usage"]
            events.append(StreamEvent("usage", obj["usage"]))
        for choice in choices:
            content = (choice.get("logprobs") or {}).get("content")
            if content is not None:  # entries ride the chunk whose delta shows their text
                if self.result.logprobs is None:
                    self.result.logprobs = []
                self.result.logprobs.extend(content)
            delta = choice.get("delta") or {}
            if delta:
                self._apply(delta)
                events.append(StreamEvent("delta", delta))
            # AFM's partial values ride the choice, beside its delta (include_partial)
            if "afm_partial" in choice:
                events.append(StreamEvent("partial", choice["afm_partial"]))
            if "afm_partial_arguments" in choice:
                events.append(StreamEvent("partial_arguments", choice["afm_partial_arguments"]))
            if choice.get("finish_reason") is not None:
                self.result.finish_reason = choice["finish_reason"]
                events.append(StreamEvent("finish", choice["finish_reason"]))
        return events

    def _check_identity(self, obj: dict[str, Any]) -> None:
        r = self.result
        if r.id is None:
            r.id, r.model, r.created = obj.get("id"), obj.get("model"), obj.get("created")
        elif obj.get("id") != r.id:
            raise AfmProtocolError(f"chunk id {obj.get('id')!r} differs from {r.id!r}")

    def _apply(self, delta: dict[str, Any]) -> None:
        r = self.result
        if delta.get("role") and r.role is None:
            r.role = delta["role"]
        r.content += delta.get("content") or ""
        r.reasoning_content += delta.get("reasoning_content") or ""
        try:
            self._calls.add_delta(delta)
        except FragmentError as exc:
            raise AfmProtocolError(str(exc)) from exc

    def close(self) -> ChatResult:
        """End of body: the result, or :class:`AfmProtocolError` if ``[DONE]`` never came."""
        for data in self._decoder.close():
            self.feed_data(data)
        if not self.done:
            raise AfmProtocolError("the stream ended without data: [DONE]")
        return self.result


def result_from_completion(body: dict[str, Any]) -> ChatResult:
    """A :class:`ChatResult` from a non-streaming ``chat.completion`` body."""
    choice = (body.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    calls = [ToolCall(i, tc.get("id"), tc.get("type"), (tc.get("function") or {}).get("name"),
                      (tc.get("function") or {}).get("arguments") or "")
             for i, tc in enumerate(message.get("tool_calls") or [])]
    key = next((k for k in PROFILE_KEYS if k in body), None)
    logprobs = (choice.get("logprobs") or {}).get("content")
    return ChatResult(logprobs=list(logprobs) if logprobs is not None else None,
                      id=body.get("id"), model=body.get("model"), created=body.get("created"),
                      role=message.get("role"), content=message.get("content") or "",
                      reasoning_content=message.get("reasoning_content") or "", tool_calls=calls,
                      finish_reason=choice.get("finish_reason"), usage=body.get("usage"),
                      profile=body.get(key) if key else None, profile_key=key,
                      enforcement=body.get(ENFORCEMENT_KEY))


def affinity_key(response_format: Any) -> str | None:
    """A digest of a ``json_schema`` response format (schema and strictness), or None.

    Sent as ``X-Affinity-Key``: behind the cluster's HAProxy, requests with one schema go to
    the replica that compiled it first, whose grammar cache is warm (deploy/haproxy.cfg).
    """
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return None
    spec = response_format.get("json_schema") or {}
    if not isinstance(spec, dict):
        return None
    canonical = json.dumps({"schema": spec.get("schema"), "strict": bool(spec.get("strict"))},
                           sort_keys=True, separators=(",", ":"), default=str)
    return "schema-" + hashlib.sha256(canonical.encode()).hexdigest()[:32]


def build_request(messages: list[dict[str, Any]], *, stream: bool, request_id: str | None = None,
                  profile: str | None = None, partial: bool = False, enforcement: bool = False,
                  **params: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """The JSON body and headers of a chat-completion request (``profile``: "true"/"extended";
    ``partial``: ``stream_options.include_partial``; ``enforcement``: the report)."""
    body: dict[str, Any] = {"messages": messages, "stream": stream, **params}
    if partial:
        body["stream_options"] = {**(body.get("stream_options") or {}), "include_partial": True}
    headers: dict[str, str] = {"X-AFM-Enforcement": "true"} if enforcement else {}
    if request_id is not None:
        headers["X-Request-ID"] = request_id
    affinity = affinity_key(params.get("response_format"))
    if affinity is not None:
        headers["X-Affinity-Key"] = affinity
    if profile is not None:
        headers["X-AFM-Profile"] = profile
    return body, headers


def _http_error(response: httpx.Response, body: bytes) -> AfmHTTPError:
    try:
        error = json.loads(body).get("error") or {}
    except (ValueError, AttributeError):
        error = {"message": body.decode(errors="replace")[:500]}
    retry = response.headers.get("retry-after")
    return AfmHTTPError(response.status_code, error,
                        retry_after=float(retry) if retry and retry.replace(".", "").isdigit() else None,
                        request_id=response.headers.get("x-request-id"))


def _attach(result: ChatResult, response: httpx.Response) -> ChatResult:
    result.headers = dict(response.headers)
    result.request_id = response.headers.get("x-request-id")
    return result


class Client:
    """Synchronous client over httpx."""

    def __init__(self, base_url: str = "http://127.0.0.1:9999", *, timeout: float = 600.0,
                 http: httpx.Client | None = None, api_key: str | None = None) -> None:
        self.http = http or httpx.Client(base_url=base_url, timeout=timeout)
        if api_key is not None:  # a server started with --api-key
            self.http.headers["Authorization"] = f"Bearer {api_key}"

    def stream(self, messages: list[dict[str, Any]], **kwargs: Any) -> EventStream:
        """Stream a completion as events; the last is ``done`` with the :class:`ChatResult`.
        With ``partial=True``, ``.partials(model)`` iterates the answer's values so far."""
        return EventStream(self._events(messages, **kwargs), partial=bool(kwargs.get("partial")))

    def _events(self, messages: list[dict[str, Any]], **kwargs: Any) -> Iterator[StreamEvent]:
        body, headers = build_request(messages, stream=True, **kwargs)
        with self.http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response:
            if response.status_code >= 400:
                raise _http_error(response, response.read())
            asm = StreamAssembler()
            _attach(asm.result, response)
            for text in response.iter_text():
                yield from asm.feed_text(text)
            if not asm.done:
                asm.close()

    def chat(self, messages: list[dict[str, Any]], *, stream: bool = True, **kwargs: Any) -> ChatResult:
        """One completion (streamed unless ``stream=False``) as a :class:`ChatResult`."""
        if stream:
            for event in self.stream(messages, **kwargs):
                if event.kind == "done":
                    return event.data  # type: ignore[no-any-return]
            raise AfmProtocolError("the stream ended without data: [DONE]")
        body, headers = build_request(messages, stream=False, **kwargs)
        response = self.http.post("/v1/chat/completions", json=body, headers=headers)
        if response.status_code >= 400:
            raise _http_error(response, response.content)
        return _attach(result_from_completion(response.json()), response)

    def cancel(self, request_id: str) -> bool:
        """Cancel an in-flight request by its X-Request-ID: True if it was in flight."""
        response = self.http.post(f"/v1/chat/completions/{request_id}/cancel")
        return bool(response.status_code == 200 and response.json().get("cancelled"))

    def close(self) -> None:
        """Close the connection pool."""
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient:
    """Asynchronous client over httpx (same behaviour as :class:`Client`)."""

    def __init__(self, base_url: str = "http://127.0.0.1:9999", *, timeout: float = 600.0,
                 http: httpx.AsyncClient | None = None, api_key: str | None = None) -> None:
        self.http = http or httpx.AsyncClient(base_url=base_url, timeout=timeout)
        if api_key is not None:  # a server started with --api-key
            self.http.headers["Authorization"] = f"Bearer {api_key}"

    def stream(self, messages: list[dict[str, Any]], **kwargs: Any) -> AsyncEventStream:
        """Stream a completion as events (as :meth:`Client.stream`)."""
        return AsyncEventStream(self._events(messages, **kwargs), partial=bool(kwargs.get("partial")))

    async def _events(self, messages: list[dict[str, Any]], **kwargs: Any) -> AsyncIterator[StreamEvent]:
        body, headers = build_request(messages, stream=True, **kwargs)
        async with self.http.stream("POST", "/v1/chat/completions", json=body,
                                    headers=headers) as response:
            if response.status_code >= 400:
                raise _http_error(response, await response.aread())
            asm = StreamAssembler()
            _attach(asm.result, response)
            async for text in response.aiter_text():
                for event in asm.feed_text(text):
                    yield event
            if not asm.done:
                asm.close()

    async def chat(self, messages: list[dict[str, Any]], *, stream: bool = True,
                   **kwargs: Any) -> ChatResult:
        """One completion (streamed unless ``stream=False``) as a :class:`ChatResult`."""
        if stream:
            async for event in self.stream(messages, **kwargs):
                if event.kind == "done":
                    return event.data  # type: ignore[no-any-return]
            raise AfmProtocolError("the stream ended without data: [DONE]")
        body, headers = build_request(messages, stream=False, **kwargs)
        response = await self.http.post("/v1/chat/completions", json=body, headers=headers)
        if response.status_code >= 400:
            raise _http_error(response, response.content)
        return _attach(result_from_completion(response.json()), response)

    async def cancel(self, request_id: str) -> bool:
        """Cancel an in-flight request by its X-Request-ID: True if it was in flight."""
        response = await self.http.post(f"/v1/chat/completions/{request_id}/cancel")
        return bool(response.status_code == 200 and response.json().get("cancelled"))

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self.http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
