"""A call cut by ``max_tokens`` reaches the client whole or not at all, never as markup (issue 33).

With ``tool_choice`` required or named the tool grammar allows no text outside the calls, so
whatever the budget, ``content`` is empty: a piece of the syntax's markup there (``</`` of
``</function>``, ``</func``) is text the call parser gave back when the budget-aware closer's
completion was cut inside the closing tags.  The calls are whole: each names the tool and its
arguments parse and validate (the value's closing tag cut to ``\\n</para`` is not part of the
value).  Hypothesis draws the syntax (each served by a tiny random-weight GGUF whose template
writes it: tests/models), the budget around the shortest call, streaming, sampling and the seed.
``AFM_STRUCT_RANDOM_EXAMPLES=N`` runs N examples.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import mlx.core as mx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ..server.conftest import decode, stream_raw
from .conftest import assemble, check_first_deltas

gguf_factory = pytest.importorskip("tests.models.gguf_factory")
gguf_moe_factory = pytest.importorskip("tests.models.gguf_moe_factory")

EXAMPLES = int(os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES", "0")) or 24
DATA = Path(__file__).parent / "data"
MODEL_DATA = Path(__file__).parents[1] / "models" / "data"
# Case → (syntax, the tiny family whose vocabulary serves it, the template writing the syntax if
# not the family's own).  Each syntax on its family's vocabulary, where its tags are mostly single
# tokens, and the tag-written ones again on Llama's, which has none of them: every tag is text
# there, so the budget can cut inside any of them.
CASES = {"hermes": ("hermes", "qwen3", None), "mistral": ("mistral", "mistral", None),
         "mistral_args": ("mistral_args", "mistral_args", None),
         "qwen3_coder": ("qwen3_coder", "qwen3_moe", None), "glm45": ("glm45", "glm4_moe", None),
         "harmony": ("harmony", "gpt_oss", None), "pythonic": ("pythonic", "llama", DATA / "pythonic.jinja"),
         "hermes_text_tags": ("hermes", "llama", MODEL_DATA / "qwen3.jinja"),
         "glm45_text_tags": ("glm45", "llama", DATA / "glm45.jinja")}
# Values from closed sets: a piece of markup in a value cannot validate.
FORECAST = {"type": "object", "properties": {
    "city": {"type": "string", "enum": ["Paris", "Rome", "Oslo"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 14},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "days", "unit"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_forecast", "description": "Weather forecast",
                                           "strict": True, "parameters": FORECAST}},
         {"type": "function", "function": {"name": "ping", "description": "Ping", "strict": True,
                                           "parameters": {"type": "object", "properties": {},
                                                          "additionalProperties": False}}}]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
NAMED = {"type": "function", "function": {"name": "get_forecast"}}


@pytest.fixture(scope="module")
def syntax_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """``syntax_server(case)`` → the URL of a live server on the case's tiny random-weight model
    (built and started on first use)."""
    from afm_struct.models.loader import load_model
    from afm_struct.tools.formats import chat_template_of, detect_format
    from server.live import start_server
    from server.settings import ServerSettings

    directory = tmp_path_factory.mktemp("syntaxes")
    live: dict[str, Any] = {}

    def url(case: str) -> str:
        if case not in live:
            syntax, family, template = CASES[case]
            build = gguf_moe_factory.MOE_FAMILIES.get(family) or gguf_factory.FAMILIES[family]
            tiny = build()
            if template is not None:
                tiny = replace(tiny, template=template.read_text(encoding="utf-8"))
            gguf_factory.build_reference(tiny)
            path = gguf_factory.write_gguf(tiny, directory / f"{case}.gguf")
            loaded = load_model(str(path), weights="float32")
            assert detect_format(chat_template_of(loaded.tokenizer)).name == syntax
            # One pass on this thread first: Llama's lazily built RoPE frequencies cannot be
            # evaluated from the scheduler thread otherwise (as tests/server/test_closing_families).
            mx.eval(loaded.model(mx.array([[1, 2]])))
            # Reasoning off: a random model that opens a thinking block may never leave it.
            live[case] = start_server(loaded, ServerSettings(reasoning="off"))
        return str(live[case].url)

    yield url
    for server in live.values():
        server.stop()


def check_answer(case: str, choice: Any, finish: str, content: str | None,
                 calls: list[tuple[str, str]]) -> None:
    """The invariant: no text, and the calls whole and valid (or none, cut by the budget)."""
    assert not content, f"{case}: content {content!r} (finish {finish}, calls {calls})"
    assert finish in ("tool_calls", "length"), (case, finish)
    if finish == "tool_calls":
        assert calls, case
    for name, arguments in calls:
        assert name in SCHEMAS and (choice != NAMED or name == "get_forecast"), (case, name)
        jsonschema.validate(json.loads(arguments), SCHEMAS[name])


def shortest_call(url: str, body: dict[str, Any]) -> int:
    """The shortest output's length in tokens, from the refusal of a budget of 1 (1 when the
    server does not know it: that answer is checked like the others)."""
    r = httpx.post(f"{url}/v1/chat/completions", json={**body, "max_tokens": 1}, timeout=120)
    if r.status_code == 400 and r.json()["error"]["code"] == "max_tokens_too_small":
        return int(r.json()["error"]["message"].rsplit(" ", 1)[-1])
    assert r.status_code == 200, r.text[:300]
    return 1


def answer(url: str, body: dict[str, Any], stream: bool) -> tuple[str, str | None, list[tuple[str, str]]]:
    """(finish, content, calls) of ``body``'s response, streamed or not."""
    if not stream:
        r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
        assert r.status_code == 200, r.text[:400]
        choice0 = r.json()["choices"][0]
        message = choice0["message"]
        calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]
        return choice0["finish_reason"], message.get("content"), calls
    response, payloads = stream_raw(url, body)
    assert response.status_code == 200
    chunks = decode(payloads)
    deltas = [c["choices"][0]["delta"] for c in chunks if c.get("choices")]
    check_first_deltas(deltas)
    got = assemble(deltas)
    finishes = [c["choices"][0]["finish_reason"] for c in chunks
                if c.get("choices") and c["choices"][0]["finish_reason"]]
    assert len(finishes) == 1, finishes
    return finishes[0], got["content"], [(c["name"], c["arguments"]) for c in got["tool_calls"]]


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
          derandomize=not os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES"))
@given(case=st.sampled_from(sorted(CASES)), choice=st.sampled_from(["required", NAMED]),
       extra=st.integers(0, 40), stream=st.booleans(), parallel=st.booleans(),
       temperature=st.sampled_from([0.0, 1.0]), seed=st.integers(0, 2**16))
def test_a_cut_call_is_whole_or_absent_never_markup(syntax_server, case: str, choice: Any, extra: int,
                                                    stream: bool, parallel: bool, temperature: float,
                                                    seed: int) -> None:
    url = syntax_server(case)
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "Forecast for Paris, 3 days?"}],
                            "tools": TOOLS, "tool_choice": choice, "parallel_tool_calls": parallel,
                            "temperature": temperature, "seed": seed}
    body["max_tokens"] = shortest_call(url, body) + extra
    check_answer(case, choice, *answer(url, body, stream))
