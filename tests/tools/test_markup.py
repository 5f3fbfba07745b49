"""Tool markup never reaches the client as content, for every tool-call format.

Before: after a tool result the model echoed Hermes' ``<tool_response>…</tool_response>`` and
the client got it as content (also a stray ``</tool_call>``, an opener that began no call,
Mistral's ``[TOOL_RESULTS]``, Llama's ``<|python_tag|>``).  The router removes each format's
tags from content, streamed and not, however the text is split.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from afm_struct.testing import scripted_loaded_model
from afm_struct.tools import ToolCallRouter, load_table
from server.live import LiveServer, start_server

from ..decoding.randomized import examples
from ..server.conftest import decode, stream_raw
from .conftest import WEATHER, as_deltas, assemble

FORMATS = load_table().formats
WORDS = ["hi", "ok", "x=1", "<b>", "a/b", "|", "_", ">", "<", "]", "21°C", "é"]


def route(fmt: Any, chunks: list[str], **kwargs: Any) -> list[dict[str, Any]]:
    router = ToolCallRouter(fmt, **kwargs)
    deltas = [d for chunk in chunks for d in as_deltas(router.feed(chunk))]
    return deltas + as_deltas(router.finish())


def content_of(deltas: list[dict[str, Any]]) -> str:
    assert not any("tool_calls" in d for d in deltas), deltas
    return "".join(d.get("content") or "" for d in deltas)


def test_every_format_lists_its_result_tags() -> None:
    """The tags each format's history writes around results are in its markup."""
    for fmt in FORMATS:
        for template in (fmt.history.result, fmt.history.call):
            for tag in re.findall(r"<\|?/?\w+\|?>|\[/?[A-Z_]+\]", template):
                assert tag in fmt.markup, (fmt.name, tag)
        assert fmt.open in fmt.markup or not fmt.open


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize("detect_calls", [True, False])
def test_an_echoed_tool_result_is_content_without_its_tags(fmt, detect_calls) -> None:
    for tag_open, tag_close in (("<tool_response>", "</tool_response>"),
                                ("[TOOL_RESULTS]", "[/TOOL_RESULTS]")):
        if tag_open not in fmt.markup:
            continue
        text = f"{tag_open}\n{{\"temp_c\": 21}}\n{tag_close}\nIt is 21 degrees."
        for size in (1, 3, len(text)):
            chunks = [text[i:i + size] for i in range(0, len(text), size)]
            got = content_of(route(fmt, chunks, detect_calls=detect_calls))
            assert got == '{"temp_c": 21}\nIt is 21 degrees.', (fmt.name, size, got)


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f.open], ids=lambda f: f.name)
def test_an_opener_that_begins_no_call_is_not_content(fmt) -> None:
    text = f"Let me think. {fmt.open} I cannot call anything."
    got = content_of(route(fmt, [text]))
    assert fmt.open not in got and got.startswith("Let me think.") and "I cannot call" in got


@settings(max_examples=examples(150), deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_no_tag_in_content_however_the_text_is_split(data) -> None:
    """Property: words, whitespace and a format's tags (not its opener, which may begin a
    call) split anywhere: the content has no tag, the same text however split, and every
    other visible character in order."""
    fmt = data.draw(st.sampled_from(FORMATS))
    tags = [t for t in fmt.markup if t != fmt.open]
    items = data.draw(st.lists(st.one_of(st.sampled_from(WORDS), st.sampled_from([" ", "\n", "  \n"]),
                                         st.sampled_from(tags)), max_size=30))
    text = "".join(items)
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=12)))
    chunks = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    detect = data.draw(st.booleans())
    got = content_of(route(fmt, chunks, detect_calls=detect))
    assert not any(tag in got for tag in fmt.markup), (fmt.name, got)
    assert got == content_of(route(fmt, [text], detect_calls=detect))
    visible = text
    for tag in tags:
        visible = visible.replace(tag, "")
    assert re.sub(r"\s", "", got) == re.sub(r"\s", "", visible)


# -- over HTTP: the embedded model's template knows no tools, so results are Hermes markup ------

ECHO = '<tool_response>\n{"temp_c": 21, "sky": "clear"}\n</tool_response>\nIt is 21 degrees and clear.'
HISTORY = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
        "name": "get_weather", "arguments": json.dumps({"city": "Paris", "unit": "celsius"})}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 21, "sky": "clear"}'},
]


@pytest.fixture(scope="module")
def live(tokenizer) -> Iterator[LiveServer]:
    server = start_server(scripted_loaded_model(tokenizer, ECHO))
    yield server
    server.stop()


@pytest.mark.parametrize("choice", ["auto", "none"])
@pytest.mark.parametrize("stream", [False, True])
def test_an_echoed_tool_response_never_reaches_the_client(live, choice, stream) -> None:
    body = {"messages": HISTORY, "tools": [WEATHER], "tool_choice": choice, "max_tokens": 64,
            "temperature": 0}
    if stream:
        response, payloads = stream_raw(live.url, body)
        assert response.status_code == 200
        chunks = decode(payloads)
        content = assemble([c["choices"][0]["delta"] for c in chunks if c.get("choices")])["content"]
    else:
        r = httpx.post(f"{live.url}/v1/chat/completions", json=body, timeout=60)
        assert r.status_code == 200, r.text[:300]
        content = r.json()["choices"][0]["message"]["content"]
    assert content == '{"temp_c": 21, "sky": "clear"}\nIt is 21 degrees and clear.', content
