"""Values no part of the engine can take are a 400 naming where they are, wherever they are.

A lone UTF-16 surrogate (``"a\\ud800"`` as a JSON escape) is not Unicode text: before the
boundary check it reached the tokenizer (a ``TypeError``: 500), the grammar compiler (a silent
unconstrained run) or the template.  ``NaN`` / ``Infinity`` / ``1e400`` (which Python's JSON
reader takes) are not JSON numbers.  Each is refused before any work, with ``param`` = the
request path of the value (of the object holding it, for a key).
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from afm_struct.testing import scripted_loaded_model
from server.live import LiveServer, start_server

from ..decoding.randomized import examples
from .conftest import decode

SURROGATE = "\ud800"
SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "description": "a city"},
                                           "days": {"type": "integer", "minimum": 1}},
          "required": ["city"]}
# A request using every free-text field the server reads (literal fields, which pydantic checks
# against their allowed values first, are listed in LITERALS).
BODY: dict[str, Any] = {
    "model": "scripted",
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}], "name": "ada"},
        {"role": "assistant", "content": "", "reasoning_content": "think",
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "user", "content": "And tomorrow?"},
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather now",
                                                "parameters": copy.deepcopy(SCHEMA)}}],
    "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "description": "d",
                                                               "schema": SCHEMA}},
    "stop": ["\n\n", "END"],
    "temperature": 0.5,
    "top_p": 0.9,
    "chat_template_kwargs": {"flavour": "plain", "depth": 1.5},
    "max_tokens": 32,  # a whole get_weather call needs ~21 (a budget below it is a 400)
}
LITERALS = {("role",), ("type",)}  # checked by pydantic against their values: not free text
FREE_FORM = ("parameters", "schema", "chat_template_kwargs")  # dicts whose keys are the client's


@pytest.fixture(scope="module")
def live(tokenizer) -> Iterator[LiveServer]:
    server = start_server(scripted_loaded_model(tokenizer, "Hello there, world!"))
    yield server
    server.stop()


def post_raw(url: str, body: Any, *, stream: bool = False) -> httpx.Response:
    """POST ``body`` as Python's json writes it: ``\\ud800`` escapes and ``NaN`` as they come."""
    content = json.dumps({**body, "stream": stream}).encode()
    return httpx.post(f"{url}/v1/chat/completions", content=content, timeout=60,
                      headers={"Content-Type": "application/json"})


def error_of(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 400, (response.status_code, response.text[:300])
    assert "text/event-stream" not in response.headers.get("content-type", "")
    err = response.json()["error"]
    assert err["type"] == "invalid_request_error" and err["code"] == "invalid_value", err
    return err


def at(body: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        body = body[part]
    return body


def leaves(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """(path, value) of every string and number in ``node``."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from leaves(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from leaves(value, (*path, i))
    else:
        yield path, node


def free_dicts(node: Any, path: tuple[Any, ...] = (), inside: bool = False,
               ) -> Iterator[tuple[Any, ...]]:
    """Paths of the non-empty dicts inside the free-form values (schemas, template kwargs)."""
    if isinstance(node, dict):
        if inside and node:
            yield path
        for key, value in node.items():
            yield from free_dicts(value, (*path, key), inside or key in FREE_FORM)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from free_dicts(value, (*path, i), inside)


TEXT_LEAVES = [p for p, v in leaves(BODY) if isinstance(v, str) and p[-1:] not in LITERALS]
NUMBER_LEAVES = [p for p, v in leaves(BODY) if isinstance(v, int | float) and not isinstance(v, bool)]
KEYED = list(free_dicts(BODY))


def dotted(path: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in path)


def test_the_base_body_is_accepted(live) -> None:
    """The property below starts from a request that succeeds."""
    r = post_raw(live.url, BODY)
    assert r.status_code == 200, r.text[:300]


# The places the issue found (each a 500 or a silent unconstrained run before the check), as
# raw JSON text so the escape is exactly what a client sends.
CASES = [
    ('{"messages":[{"role":"user","content":"a\\ud800"}]}', "messages.0.content"),
    ('{"messages":[{"role":"user","content":[{"type":"text","text":"a\\udfff b"}]}]}',
     "messages.0.content.0.text"),
    ('{"messages":[{"role":"system","content":"\\ud800"},{"role":"user","content":"x"}]}',
     "messages.0.content"),
    ('{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":'
     '{"name":"f","description":"a\\ud800","parameters":{"type":"object"}}}]}',
     "tools.0.function.description"),
    ('{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema",'
     '"json_schema":{"name":"n","schema":{"type":"object","properties":{"a\\ud800":{}}}}}}',
     "response_format.json_schema.schema.properties"),
    ('{"messages":[{"role":"user","content":"x"}],"stop":"a\\ud800"}', "stop"),
    ('{"messages":[{"role":"user","content":"x","name":"\\udc00"}]}', "messages.0.name"),
    ('{"messages":[{"role":"user","content":"x"}],"temperature":NaN}', "temperature"),
    ('{"messages":[{"role":"user","content":"x"}],"repetition_penalty":Infinity}',
     "repetition_penalty"),
    ('{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema",'
     '"json_schema":{"name":"n","schema":{"type":"number","maximum":1e400}}}}',
     "response_format.json_schema.schema.maximum"),
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("raw", "param"), CASES)
def test_bad_values_are_400_naming_their_path(live, raw, param, stream) -> None:
    # Python's json reads the escapes and NaN / Infinity / 1e400 (as inf) and writes them back.
    err = error_of(post_raw(live.url, json.loads(raw), stream=stream))
    assert err["param"] == param, err
    # The server goes on: the same request without the bad value succeeds.
    fine = json.loads(raw.replace("\\ud800", "").replace("\\udfff", "").replace("\\udc00", "y")
                      .replace("NaN", "1").replace("Infinity", "1").replace("1e400", "1"))
    ok = post_raw(live.url, fine, stream=stream)
    assert ok.status_code == 200, ok.text[:300]
    if stream:
        decode([line[6:] for line in ok.text.splitlines() if line.startswith("data: ")])


@settings(max_examples=examples(25), deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_surrogate_or_non_finite_number_anywhere_is_a_400_at_its_path(live, data) -> None:
    """Property: put one bad value at a random place of a full request; the 400 names it."""
    body = copy.deepcopy(BODY)
    kind = data.draw(st.sampled_from(["text", "key", "number"]))
    if kind == "text":
        path = data.draw(st.sampled_from(TEXT_LEAVES))
        where = data.draw(st.integers(0, len(at(body, path))))
        text = at(body, path)
        at(body, path[:-1])[path[-1]] = text[:where] + SURROGATE + text[where:]
        param = path
    elif kind == "key":
        path = data.draw(st.sampled_from(KEYED))
        holder = at(body, path)
        key = data.draw(st.sampled_from(sorted(holder)))
        holder[key + SURROGATE] = holder.pop(key)
        param = path
    else:
        path = data.draw(st.sampled_from(NUMBER_LEAVES))
        at(body, path[:-1])[path[-1]] = data.draw(st.sampled_from([math.nan, math.inf, -math.inf]))
        param = path
    err = error_of(post_raw(live.url, body, stream=data.draw(st.booleans())))
    assert err["param"] == dotted(param), (kind, err)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("extra", "param"), [
    ({"seed": -1}, "seed"), ({"seed": 2 ** 64}, "seed"), ({"seed": 10 ** 30}, "seed"),
    ({"top_k": 1.5}, "top_k"), ({"temperature": 1e400}, "temperature"),
])
def test_sampling_values_outside_their_range_are_400_before_any_stream(live, extra, param, stream) -> None:
    """A seed outside mx.random.key's 64 bits was a 500 ("admission failed") and, streamed, a
    200 whose stream ended in an error chunk."""
    err = error_of(post_raw(live.url, {"messages": [{"role": "user", "content": "x"}], **extra},
                            stream=stream))
    assert err["param"] == param, err


@pytest.mark.parametrize("seed", [0, 2 ** 64 - 1])
def test_the_whole_64_bit_seed_range_is_served(live, seed) -> None:
    body = {"messages": [{"role": "user", "content": "x"}], "seed": seed, "temperature": 1.0}
    assert post_raw(live.url, body).status_code == 200


@pytest.mark.parametrize("extra", [{"top_p": 1e-300, "temperature": 1.0}, {"temperature": 1e-300},
                                   {"temperature": 1e-45, "seed": 5}])
def test_extreme_but_valid_sampling_values_follow_the_model(live, extra) -> None:
    """A temperature or top_p below float32's range is the argmax (the scripted model's text);
    before, logits became inf / NaN or no token survived, and the draws were garbage."""
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 16, **extra}
    r = post_raw(live.url, body)
    assert r.status_code == 200, r.text[:300]
    assert r.json()["choices"][0]["message"]["content"] == "Hello there, world!"
