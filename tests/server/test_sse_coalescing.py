"""A stream's frames that are ready together go out in one write (server/run.py ``sse_body``).

Each ASGI write costs the event loop its way through the middlewares, h11 and a socket send;
under load (32 streams, issue 40) that was most of the loop's time per token.  A real server on
an ephemeral port, a real HTTP client; the server's outermost ASGI app is wrapped to count the
body writes of the chat stream and to stall the event loop once after the first one, so that
the scheduler's next tokens are delivered while the loop cannot write.  The events and their
bytes are exactly those of a stream that was never stalled.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from afm_struct.testing import Script
from server.sse import encode_event

from .conftest import decode, sse_payloads

TEXT = "One two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen."
BODY = {"messages": [{"role": "user", "content": "count"}], "stream": True,
        "max_tokens": 200}


def read_stream(url: str) -> tuple[bytes, list[Any]]:
    """The raw body of one chat stream and its decoded events."""
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=BODY, timeout=60) as response:
        assert response.status_code == 200
        raw = response.read()
    return raw, decode(sse_payloads(iter(raw.decode().split("\n")[:-1])))


def test_events_ready_together_go_out_in_one_write(serve) -> None:
    live = serve(Script(TEXT, forward_s=0.01))
    plain_raw, plain = read_stream(live.url)  # a stream never stalled
    writes: list[bytes] = []
    inner = live.server.config.loaded_app  # what each new connection runs (uvicorn)

    async def counting(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/chat/completions":
            await inner(scope, receive, send)
            return

        async def counted(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body" and message.get("body"):
                writes.append(message["body"])
                if len(writes) == 1:
                    # The whole event loop stops (a blocking sleep on it) while the scheduler
                    # thread goes on producing the next tokens at 10 ms a step.
                    time.sleep(0.4)
            await send(message)

        await inner(scope, receive, counted)

    live.server.config.loaded_app = counting
    raw, events = read_stream(live.url)
    assert b"".join(writes) == raw
    content = [e for e in events if e.get("choices") and e["choices"][0]["delta"].get("content")]
    assert len(content) > 10  # one chunk per token, as before
    assert len(writes) < len(content)  # the stalled tokens went out together
    strip = ("id", "created", "system_fingerprint")

    def same(evs: list[Any]) -> list[str]:
        return [json.dumps({k: v for k, v in e.items() if k not in strip}, sort_keys=True) for e in evs]

    assert same(events) == same(plain)  # the same events, in the same order
    assert raw.count(b"data: ") == plain_raw.count(b"data: ")


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8)


@settings(max_examples=60, deadline=None)
@given(payload=st.dictionaries(st.text(max_size=5), JSON_VALUES, max_size=4),
       text=st.text(alphabet=st.sampled_from("ab\n\x85\u2028\u2029é\"\\\x00"), max_size=10))
def test_an_event_is_encoded_as_before(payload, text) -> None:
    """The encoder made once and the line-break scan give the bytes ``json.dumps`` and a
    translation of every event gave."""
    payload = {**payload, "content": text}
    before = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).translate(
        str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}))
    assert encode_event(payload) == b"data: " + before.encode() + b"\n\n"
    assert len(encode_event(payload)[:-2].decode().splitlines()) == 1  # one data line
