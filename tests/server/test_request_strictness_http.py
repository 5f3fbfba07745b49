"""No request sets engine options, and integer fields are integers (issue 46, finding 11).

* ``%llguidance {"allow_invalid_utf8": true}`` at the top of a user's Lark grammar turned the
  engine's UTF-8 check off (a byte-level regex then compiled); ``x-guidance`` in a schema was
  already dropped.  Now a user's grammar sets no engine option either.
* ``max_tokens: "5"`` and ``true`` were taken as numbers, on every door; now a 400 naming the
  field.  A 5,000-digit integer was "the body could not be read as JSON: ValueError"; now a
  400 naming the field that holds it.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from afm_struct.grammar.engines.options import without_engine_options

USER = [{"role": "user", "content": "hi"}]
BYTES = "start: /(?-u:[\\x80-\\xff])+/"


@pytest.mark.parametrize("header", ['%llguidance {"allow_invalid_utf8": true}',
                                    '%llguidance { "allow_invalid_utf8" : true , "no_forcing": true }'])
def test_a_grammar_sets_no_engine_option(serve: Any, header: str) -> None:
    live = serve("Hello")
    for grammar in (BYTES, f"{header}\n{BYTES}", f"// options\n{header}\n\n{BYTES}"):
        r = httpx.post(f"{live.url}/v1/chat/completions", timeout=60,
                       json={"messages": USER, "guided_grammar": grammar})
        assert r.status_code == 400, (grammar, r.text[:300])
        assert r.json()["error"]["param"] == "guided_grammar"
    r = httpx.post(f"{live.url}/v1/responses", timeout=60, json={"input": "hi", "text": {"format": {
        "type": "grammar", "syntax": "lark", "definition": f"{header}\n{BYTES}"}}})
    assert r.status_code == 400, r.text[:300]


def test_engine_options_are_dropped_and_nothing_else() -> None:
    grammar = ('%llguidance {"allow_invalid_utf8": true}\n'
               'start: "%llguidance {\\"a\\": 1}" x  // %llguidance {"b": 2}\n'
               'x: %json {"type": "string", "x-guidance": {"lenient": true}} | /%llguidance \\{/\n')
    out = without_engine_options(grammar)
    assert out.startswith("%llguidance {}\n")
    assert '"%llguidance {\\"a\\": 1}"' in out and '// %llguidance {"b": 2}' in out
    assert "x-guidance" not in out and '%json {"type": "string"}' in out
    assert "/%llguidance \\{/" in out
    plain = 'start: "a" | %json {"type": "integer"}\n'
    assert without_engine_options(plain) is plain


def _big(digits: int = 5000) -> str:
    return "9" * digits


LOOSE = [
    ("/v1/chat/completions", {"messages": USER}, "max_tokens", ["5", True, 5.5]),
    ("/v1/chat/completions", {"messages": USER}, "max_completion_tokens", ["5", False]),
    ("/v1/chat/completions", {"messages": USER}, "seed", ["1", True]),
    ("/v1/chat/completions", {"messages": USER}, "top_k", ["5", True]),
    ("/v1/chat/completions", {"messages": USER}, "n", ["1", True]),
    ("/v1/chat/completions", {"messages": USER}, "temperature", ["0.5", True]),
    ("/v1/chat/completions", {"messages": USER}, "max_reasoning_tokens", ["5", True]),
    ("/v1/completions", {"prompt": "x"}, "max_tokens", ["5", True]),
    ("/v1/completions", {"prompt": "x"}, "logprobs", ["1", True]),
    ("/v1/responses", {"input": "hi"}, "max_output_tokens", ["5", True]),
    ("/v1/responses", {"input": "hi"}, "top_logprobs", ["1", True]),
    ("/api/chat", {"model": "scripted", "messages": USER, "stream": False}, "top_logprobs", ["1", True]),
    ("/api/chat", {"model": "scripted", "messages": USER, "stream": False}, "options.num_predict",
     ["5", True]),
    ("/api/chat", {"model": "scripted", "messages": USER, "stream": False}, "options.top_k", ["5", True]),
    ("/api/generate", {"model": "scripted", "prompt": "x", "stream": False}, "options.seed", ["5", True]),
]


def _with(body: dict[str, Any], field: str, value: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(body))
    if field.startswith("options."):
        out.setdefault("options", {})[field.split(".", 1)[1]] = value
    else:
        out[field] = value
    return out


@pytest.mark.parametrize(("path", "body", "field", "values"), LOOSE)
def test_numeric_fields_take_numbers_only(serve: Any, path: str, body: dict[str, Any], field: str,
                                          values: list[Any]) -> None:
    live = serve("Hello")
    for value in values:
        r = httpx.post(f"{live.url}{path}", json=_with(body, field, value), timeout=60)
        assert r.status_code == 400, (field, value, r.text[:300])
        error = r.json()["error"]
        if isinstance(error, dict):
            assert error["param"] == field, error
        else:  # Ollama's error: the message names the field
            assert field in error or field.split(".")[-1] in error, error


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/v1/chat/completions", {"messages": USER}, "max_tokens"),
    ("/v1/completions", {"prompt": "x"}, "seed"),
    ("/v1/responses", {"input": "hi"}, "max_output_tokens"),
    ("/api/chat", {"model": "scripted", "messages": USER, "stream": False}, "options.num_predict"),
])
def test_a_5000_digit_integer_names_its_field(serve: Any, path: str, body: dict[str, Any],
                                              field: str) -> None:
    live = serve("Hello")
    text = json.dumps(_with(body, field, 0)).replace(": 0", f": {_big()}", 1)
    assert _big() in text
    r = httpx.post(f"{live.url}{path}", content=text, headers={"content-type": "application/json"},
                   timeout=60)
    assert r.status_code == 400, r.text[:300]
    error = r.json()["error"]
    message = error["message"] if isinstance(error, dict) else error
    assert field in message and "5,000 digits" in message and "ValueError" not in message
    if isinstance(error, dict):
        assert error["param"] == field


def test_integers_still_serve(serve: Any) -> None:
    live = serve("Hello there")
    r = httpx.post(f"{live.url}/v1/chat/completions", timeout=60,
                   json={"messages": USER, "max_tokens": 2, "seed": 3, "temperature": 1, "top_k": 0})
    assert r.status_code == 200, r.text[:300]
    assert r.json()["usage"]["completion_tokens"] == 2
