"""Client faults in a constraint are a 400 or a correct answer, never a 500 (issue 46, finding 6).

Two classes, over real HTTP on the scripted model, through several doors:

* special-token text a constraint requires (``<|im_end|>x`` as a regex, a choice, a schema
  ``const``, a Lark literal) was tokenized by the engine into the special token, which its own
  parser then rejected: 500 "the grammar rejected a token it allowed".  Request text never
  becomes a special token, so the answer is the text, written with plain tokens;
* a constraint whose language is empty (a rule that only refers to itself, ``multipleOf`` with
  no multiple in range): 500.  Now a 400 ``constraint_unsatisfiable`` naming the field, before
  any stream starts; one that empties only later ends with the same error.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from .conftest import decode, stream_raw

USER = [{"role": "user", "content": "hi"}]


def _schema(schema: Any) -> dict[str, Any]:
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}


SPECIAL_TEXT = [
    ({"guided_regex": "<\\|im_end\\|>x"}, "<|im_end|>x"),
    ({"guided_choice": ["<|im_end|>x"]}, "<|im_end|>x"),
    ({"guided_choice": ["<|im_start|>", "<|endoftext|>"]}, None),
    (_schema({"const": "<|im_end|>"}), '"<|im_end|>"'),
    (_schema({"enum": ["<|im_start|>assistant"]}), '"<|im_start|>assistant"'),
    ({"guided_grammar": 'start: "<|im_end|>" "<|im_start|>"'}, "<|im_end|><|im_start|>"),
]


@pytest.mark.parametrize(("fields", "expected"), SPECIAL_TEXT)
def test_special_token_text_is_written_as_text(serve: Any, fields: dict[str, Any],
                                               expected: str | None) -> None:
    live = serve("Hello there, world!")
    r = httpx.post(f"{live.url}/v1/chat/completions", json={"messages": USER, **fields}, timeout=60)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    if expected is None:
        assert choice["message"]["content"] in fields["guided_choice"]
    else:
        assert choice["message"]["content"] == expected
    assert choice["finish_reason"] == "stop"


def test_special_token_text_mid_output_streams_as_text(serve: Any) -> None:
    live = serve("Hello there, world!")
    pattern = "[a-c]{2}<\\|im_start\\|>!"
    response, payloads = stream_raw(live.url, {"messages": USER, "guided_regex": pattern, "logprobs": True})
    assert response.status_code == 200
    chunks = decode(payloads)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert re.fullmatch(pattern, text), text
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    # Every token the model wrote is plain text: its logprob entries spell the output.
    entries = [e for c in chunks if c["choices"] and c["choices"][0].get("logprobs")
               for e in c["choices"][0]["logprobs"]["content"]]
    assert "".join(e["token"] for e in entries) == text
    assert all(e["token"] not in ("<|im_start|>", "<|im_end|>") for e in entries)


EMPTY = [
    ("/v1/chat/completions", {"messages": USER, "guided_grammar": "root ::= x\nx ::= x"},
     "guided_grammar"),
    ("/v1/chat/completions", {"messages": USER, "guided_grammar": "start: x | y\nx: y\ny: x"},
     "guided_grammar"),
    ("/v1/chat/completions", {"messages": USER, **_schema(
        {"type": "number", "multipleOf": 0.1, "minimum": 0.25, "maximum": 0.35})},
     "response_format.json_schema.schema"),
    ("/v1/completions", {"prompt": "x", "guided_grammar": "root ::= x\nx ::= x"}, "guided_grammar"),
    ("/v1/responses", {"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": {
        "type": "number", "multipleOf": 0.1, "minimum": 0.25, "maximum": 0.35}}}}, "text.format.schema"),
    ("/api/chat", {"model": "scripted", "messages": USER, "stream": False, "format": {
        "type": "number", "multipleOf": 0.1, "minimum": 0.25, "maximum": 0.35}}, "format"),
]


@pytest.mark.parametrize(("path", "body", "param"), EMPTY)
def test_empty_language_is_400_naming_the_field(serve: Any, path: str, body: dict[str, Any],
                                                param: str) -> None:
    live = serve("Hello there, world!")
    r = httpx.post(f"{live.url}{path}", json=body, timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    if isinstance(error, str):  # Ollama's error body: the message alone
        assert "no output satisfies the constraint" in error and "empty" in error
        return
    assert error["code"] == "constraint_unsatisfiable"
    assert error["param"] == param
    assert "empty" in error["message"]


def test_empty_language_streaming_is_400_before_headers(serve: Any) -> None:
    live = serve("Hello there, world!")
    response, _ = stream_raw(live.url, {"messages": USER, "guided_grammar": "root ::= x\nx ::= x"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "constraint_unsatisfiable"


def test_language_that_empties_later_is_a_typed_400(serve: Any) -> None:
    # "H" is allowed, and the scripted model says "Hello": after it nothing can follow.
    live = serve("Hello there, world!")
    body = {"messages": USER, "guided_grammar": 'start: "H" x | "z"\nx: x', "temperature": 0}
    r = httpx.post(f"{live.url}/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "constraint_unsatisfiable"
    # Streaming: the same error in the stream after its headers, then [DONE] (or a 400 when
    # the first token already failed); never a 500 and never a silent "stop".
    response, payloads = stream_raw(live.url, body)
    if response.status_code == 200:
        events = [json.loads(p) for p in payloads[:-1]]
        assert payloads[-1] == "[DONE]"
        assert any("error" in e for e in events) or events[-1]["choices"][0]["finish_reason"] == "stop"
    else:
        assert response.status_code == 400
