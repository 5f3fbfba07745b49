"""Numbers the grammar engine crashes on or changes, through every door, over real HTTP
(issue 46, findings 1 and 5; afm_struct/grammar/engines/llguidance_numbers.py).

Before: ``{"type": "integer", "minimum": -2^63, "maximum": -2^63}`` (and its neighbours) sent
llguidance 1.9.1 into endless recursion, SIGSEGV: the server (here: the test process, whose
thread serves) died with every stream.  ``[2^64, 2^64+4]`` was served as ``exact`` with
``9223372036854775807``, and ``(0, 1e-300)`` exclusive with ``0``.  Now a JSON Schema door
serves such a schema relaxed (``X-Grammar-Constraints: downgraded`` when strict), a Lark
``%json`` block is a 400 naming it, and a stream running meanwhile ends with ``[DONE]``.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx
import jsonschema
import pytest

from afm_struct.testing import Script

from .conftest import USER, decode, sse_payloads

I64_MIN = -(2**63)
CRASH = {"type": "integer", "minimum": I64_MIN, "maximum": I64_MIN}
# The others of the class: floats that saturate to -2^63, an exclusive bound onto it, a const.
NEIGHBOURS = [
    {"type": "integer", "minimum": -1e20, "maximum": -1e19},
    {"type": "integer", "minimum": -1e300, "maximum": -1e299},
    {"type": "integer", "minimum": -1e19, "exclusiveMaximum": I64_MIN + 1},
    {"type": "object", "properties": {"n": {"const": I64_MIN + 7}}, "required": ["n"]},
    {"type": "array", "items": {"enum": [1, I64_MIN]}},
]
BEYOND_INT64 = {"type": "integer", "minimum": 2**64, "maximum": 2**64 + 4}
NO_DECIMAL = {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1e-300}
STORY = " ".join(f"w{i}" for i in range(60))


def _said(tokenizer: Any) -> Script:
    """The model says what the old grammars forced (and a story to the streaming request)."""
    def text(ids: list[int]) -> str:
        prompt = tokenizer.decode(ids)
        if "BIG" in prompt:
            return "9223372036854775807"
        if "TINY" in prompt:
            return "0"
        return STORY
    return Script(text, delay_s=0.002)


@pytest.fixture(scope="module")
def live(tokenizer: Any):  # type: ignore[no-untyped-def]
    from afm_struct.testing import scripted_loaded_model
    from server.live import start_server

    server = start_server(scripted_loaded_model(tokenizer, _said(tokenizer)))
    yield server
    server.stop()


def _chat(url: str, **fields: Any) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json={"messages": USER, "max_tokens": 60, **fields},
                      timeout=60)


def _fmt(schema: Any, strict: bool) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "n", "schema": schema, "strict": strict}}


def _tools(schema: Any, strict: bool) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": "f", "strict": strict, "parameters": {
        "type": "object", "properties": {"v": schema}, "required": ["v"], "additionalProperties": False}}}]


def _doors(url: str, schema: Any) -> dict[str, httpx.Response]:
    """The same schema through every door that takes one."""
    lark = "start: %json " + json.dumps(schema)
    return {
        "response_format strict": _chat(url, response_format=_fmt(schema, True)),
        "response_format": _chat(url, response_format=_fmt(schema, False)),
        "guided_json": _chat(url, guided_json=schema),
        "tool strict": _chat(url, tools=_tools(schema, True), tool_choice="required"),
        "tool": _chat(url, tools=_tools(schema, False), tool_choice="required"),
        "responses text.format": httpx.post(f"{url}/v1/responses", timeout=60, json={
            "input": "hi", "max_output_tokens": 60,
            "text": {"format": {"type": "json_schema", "name": "n", "schema": schema, "strict": True}}}),
        "ollama format": httpx.post(f"{url}/api/chat", timeout=60, json={
            "model": "scripted", "messages": USER, "stream": False, "format": schema,
            "options": {"num_predict": 60}}),
        "guided_grammar %json": _chat(url, guided_grammar=lark),
        "custom tool grammar %json": httpx.post(f"{url}/v1/responses", timeout=60, json={
            "input": "hi", "max_output_tokens": 60, "tool_choice": "required",
            "tools": [{"type": "custom", "name": "g", "format": {"type": "grammar", "syntax": "lark",
                                                                 "definition": lark}}]}),
    }


class Stream:
    """One ordinary stream running while the hostile requests arrive."""

    def __init__(self, url: str) -> None:
        self.events: list[Any] | None = None
        self.started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(url,))
        self.thread.start()
        assert self.started.wait(30)

    def _run(self, url: str) -> None:
        body = {"messages": [{"role": "user", "content": "a story"}], "max_tokens": 60, "stream": True}
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=120) as r:
            lines = r.iter_lines()
            first = [next(lines), next(lines)]
            self.started.set()
            self.events = decode(sse_payloads(iter([*first, *lines])))

    def finish(self) -> None:
        """The stream ended as it would alone: the whole story, ``stop``... or ``length``."""
        self.thread.join(120)
        assert self.events is not None, "the stream did not end"
        text = "".join(e["choices"][0]["delta"].get("content") or "" for e in self.events if e.get("choices"))
        assert text.startswith("w0 w1 w2"), text[:40]
        assert not [e for e in self.events if "error" in e]


@pytest.mark.parametrize("schema", [CRASH, *NEIGHBOURS], ids=["i64min", "1e20", "1e300", "exclusive",
                                                                "const", "enum"])
def test_a_schema_the_engine_crashes_on_is_served_honestly_by_every_door(live, schema) -> None:
    stream = Stream(live.url)
    answers = _doors(live.url, schema)
    stream.finish()
    for door, r in answers.items():
        if "%json" in door:
            # A grammar has no ladder: refused, naming the block and the keyword.
            if door.startswith("guided_grammar"):
                assert r.status_code == 400, (door, r.text)
                error = r.json()["error"]
                assert "%json" in error["message"] and "$." in error["message"], error
                assert error["param"] == "guided_grammar"
            else:  # a custom tool's Lark takes no directives: refused before any engine
                assert r.status_code == 400, (door, r.text)
                assert r.json()["error"]["param"] == "tools.0.format.definition", r.text
            continue
        assert r.status_code == 200, (door, r.text)
        assert r.headers["x-afm-constraint-mode"] != "exact", door
        # Strict: the doors saying so, and those strict by their protocol (vLLM's guided_json,
        # Ollama's format); the Responses door above asks for strict.
        strict = door.endswith("strict") or door in ("guided_json", "ollama format", "responses text.format")
        assert (r.headers.get("x-grammar-constraints") == "downgraded") == strict, door
    assert httpx.get(f"{live.url}/health", timeout=10).status_code == 200


@pytest.mark.parametrize("schema, word", [(BEYOND_INT64, "BIG"), (NO_DECIMAL, "TINY")],
                         ids=["2^64", "1e-300"])
@pytest.mark.parametrize("strict", [True, False])
def test_exact_never_serves_a_number_the_schema_rejects(live, schema, word, strict) -> None:
    r = httpx.post(f"{live.url}/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": word}], "max_tokens": 30,
        "response_format": _fmt(schema, strict)})
    assert r.status_code == 200, r.text
    content = r.json()["choices"][0]["message"]["content"]
    valid = jsonschema.Draft202012Validator(schema).is_valid(json.loads(content))
    mode = r.headers["x-afm-constraint-mode"]
    # What the engine emitted before (2^63-1; 0), now under an honest mode.
    assert content in ("9223372036854775807", "0")
    assert not valid and mode != "exact", (content, mode)
    assert (r.headers.get("x-grammar-constraints") == "downgraded") == strict


def test_an_integer_range_holding_no_integer_beyond_int64_is_a_400_naming_it(live) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "exclusiveMinimum": 2**64,
                                                     "exclusiveMaximum": 2**64 + 1}}, "required": ["n"]}
    for strict in (True, False):
        r = _chat(live.url, response_format=_fmt(schema, strict))
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert "no integer" in error["message"] and "$.properties.n" in error["message"], error
