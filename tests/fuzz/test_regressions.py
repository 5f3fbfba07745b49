"""The fuzzer's cases, one per class of violation it found, as named regression tests.

Each body is the case the fuzzer drew (tests/fuzz/test_contract_fuzz.py), replayed against the
same tiny random-weight model; the assertion is the contract's invariant it broke.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from .driver import FamilyServers, send
from .requests import FuzzCase


def _violations(servers: FamilyServers, family: str, body: dict[str, Any], invariant: str) -> list[str]:
    outcome = send(servers.get(family), FuzzCase(body))
    assert outcome.status == 200, outcome.report()
    return [str(v) for v in outcome.violations if v.invariant == invariant]


def test_control_tokens_never_reach_content(family_servers: FamilyServers) -> None:
    # Greedy mistral v0.3 samples [AVAILABLE_TOOLS] (a control token) in a plain text answer.
    body = {
        "temperature": 0.0,
        "seed": 905,
        "max_tokens": 29,
        "response_format": {"type": "text"},
        "messages": [{"role": "user", "content": "name city the the note name id Paris weather x a name"}],
    }
    assert _violations(family_servers, "mistral", body, "markup") == []
    streamed = {**body, "stream": True}
    assert _violations(family_servers, "mistral", streamed, "markup") == []


def test_skip_special_tokens_false_shows_them(family_servers: FamilyServers) -> None:
    # The opt-out, as vLLM's: the same answer with its control token's text.
    body = {
        "temperature": 0.0,
        "seed": 905,
        "max_tokens": 29,
        "skip_special_tokens": False,
        "messages": [{"role": "user", "content": "name city the the note name id Paris weather x a name"}],
    }
    assert any("[AVAILABLE_TOOLS]" in v for v in _violations(family_servers, "mistral", body, "markup"))


def test_thinking_tags_never_reach_reasoning_content(family_servers: FamilyServers) -> None:
    # Greedy qwen3 opens its thinking block, then writes <think> again inside it.
    body = {
        "temperature": 0.0,
        "seed": 111518278,
        "max_tokens": 70,
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "id x value count name id items"},
        ],
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": "answer",
                "strict": False,
                "schema": {
                    "type": "object",
                    "required": [],
                    "properties": {
                        "count": {
                            "type": "array",
                            "items": {"type": "integer", "minimum": -19, "maximum": 302},
                            "minItems": 0,
                            "maxItems": 2,
                        },
                        "weather": {"type": "array", "items": {"type": "null"}, "minItems": 2, "maxItems": 4},
                    },
                },
            },
        },
    }
    assert _violations(family_servers, "qwen3", body, "markup") == []


def test_a_call_opener_cut_by_the_budget_never_reaches_content(family_servers: FamilyServers) -> None:
    # Gemma's template knows no tools: calls are Hermes' <tool_call>, spelled in bytes, so a
    # small budget cuts the opener itself ('<tool' came out as content under tool_choice required).
    import httpx

    url = f"{family_servers.get('gemma2').url}/v1/chat/completions"
    for max_tokens in (2, 3, 5):
        body = {
            "temperature": 0.0,
            "max_tokens": max_tokens,
            "afm_close_on_length": False,
            "messages": [{"role": "user", "content": "name note"}],
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "tool_choice": "required",
        }
        message = httpx.post(url, json=body, timeout=60).json()["choices"][0]["message"]
        assert not message["content"] and not message.get("tool_calls"), (max_tokens, message)


def test_a_tool_without_description_renders_in_every_template(family_servers: FamilyServers) -> None:
    # Mistral's template writes tool.description, which OpenAI's schema makes optional: the
    # fuzzer's tools without one were a 400 (jinja2 UndefinedError) on mistral.
    body = {
        "temperature": 0.0,
        "max_tokens": 4,
        "messages": [{"role": "user", "content": "note name Paris"}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "search",
                    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
                },
            }
        ],
    }
    for family in ("mistral", "mistral_args", "qwen3", "llama"):
        outcome = send(family_servers.get(family), FuzzCase(body))
        assert outcome.status == 200 and not outcome.violations, outcome.report()


def test_a_turn_after_tool_results_renders_in_strictly_alternating_templates(
    family_servers: FamilyServers,
) -> None:
    # Gemma's template knows no tools: results are written as a user turn, and the user's next
    # turn made two in a row, which the template refuses ("Conversation roles must alternate").
    body = {
        "temperature": 0.0,
        "max_tokens": 4,
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "messages": [
            {"role": "user", "content": "city"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": '{"ok": true}'},
            {"role": "user", "content": "And now?"},
        ],
    }
    for family in ("gemma2", "gemma3", "phi3"):
        outcome = send(family_servers.get(family), FuzzCase(body))
        assert outcome.status == 200 and not outcome.violations, outcome.report()


CUT_DEEP = {
    "temperature": 0.0,
    "seed": 1673,
    "max_completion_tokens": 295,
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "a a note note a value value Paris id value"},
    ],
    "response_format": {
        "type": "json_schema",
        "json_schema": {
            "name": "answer",
            "strict": True,
            "schema": {
                "type": "object",
                "required": ["shape", "dimensions"],
                "properties": {
                    "dimensions": {
                        "type": "object",
                        "oneOf": [
                            {"required": ["side"]},
                            {"required": ["radius"]},
                            {"required": ["base", "height"]},
                        ],
                        "properties": {k: {"type": "integer"} for k in ("base", "height", "radius", "side")},
                    },
                    "shape": {"enum": ["square", "rectangle", "circle", "triangle"], "type": "string"},
                },
            },
        },
    },
}


@pytest.mark.parametrize("budget", [256, 270, 295])
def test_strict_output_cut_deep_in_open_objects_still_validates(family_servers: FamilyServers,
                                                                 budget: int) -> None:
    # Greedy mistral writes random keys of byte-fallback tokens in the open 'dimensions' object.
    # At 270 and 295 a byte run split a character across steps; the closer decoded each step's
    # new tokens alone, the tokenizer turned the whole byte run into U+FFFD (a closing '"'
    # byte included), so the closer believed the key still open and never found a completion:
    # the output ended unclosed, mid-string at 270 and after '",' at 295.
    assert _violations(family_servers, "mistral", {**CUT_DEEP, "max_completion_tokens": budget},
                       "strict") == []


HARMONY_STRAY_CHANNEL = {
    "temperature": 1.0,
    "seed": 583836,
    "max_tokens": 190,
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "weather Paris value"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"ok": true}'},
        {"role": "user", "content": "And now?"},
    ],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "tool_choice": "none",
}


@pytest.mark.parametrize("stream", [False, True])
def test_a_harmony_channel_tag_that_starts_no_channel_never_reaches_content(
    family_servers: FamilyServers, stream: bool
) -> None:
    # gpt-oss's <|channel|> is kept for the reasoning splitter (it starts the analysis channel
    # and the framing it drops); sampled before text that names no channel, the splitter gave
    # it back as text, and content held '<|channel|>' (3 of 60 gpt_oss responses).
    body = {**HARMONY_STRAY_CHANNEL, "stream": stream}
    assert _violations(family_servers, "gpt_oss", body, "markup") == []


@pytest.mark.parametrize("stream", [False, True])
def test_a_required_call_cut_at_its_first_character_gives_no_content(
    family_servers: FamilyServers, stream: bool
) -> None:
    # Harmony on Llama's vocabulary writes its tags as text; with closing off, one token of a
    # required call is '<', which the reasoning splitter and the markup stripper each give out
    # as text at the end (a lone '<' is as likely text): content was '<'.  Required or named,
    # the grammar allows no text outside the calls.
    body = {
        "temperature": 0.0,
        "max_tokens": 1,
        "afm_close_on_length": False,
        "stream": stream,
        "messages": [{"role": "user", "content": "name note"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "tool_choice": "required",
    }
    assert _violations(family_servers, "llama_harmony", body, "tools") == []
    named = {**body, "tool_choice": {"type": "function", "function": {"name": "f"}}}
    assert _violations(family_servers, "llama_harmony", named, "tools") == []


@pytest.mark.parametrize("stream", [False, True])
def test_tool_markup_tokens_never_reach_reasoning_content(
    family_servers: FamilyServers, stream: bool
) -> None:
    # GLM's tool tags are control tokens, kept for the call router (it reads and strips them in
    # the answer); sampled inside the thinking block, nothing removed them: reasoning_content
    # held '</arg_key>' (3 of 80 glm4_moe responses).
    body = {
        "temperature": 1.0,
        "seed": 0,
        "max_completion_tokens": 16,
        "afm_close_on_length": False,
        "stream": stream,
        "messages": [{"role": "user", "content": "value name Paris"}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "f",
                    "strict": False,
                    "parameters": {
                        "type": "object",
                        "properties": {"city": {"type": "array", "items": {"type": "string"}, "maxItems": 2}},
                    },
                },
            },
            {"type": "function", "function": {"name": "get_weather", "strict": True}},
        ],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
    }
    assert _violations(family_servers, "glm4_moe", body, "markup") == []



def test_a_raw_string_value_cut_by_the_budget_is_closed_at_its_end_tag(family_servers: FamilyServers) -> None:
    # Qwen3-Coder writes a string parameter as raw text up to '\n</parameter>\n' (text, not a
    # token, in its vocabulary).  The closing search took the commas and brackets allowed in
    # raw text for JSON structure and never tried the end tag: with closing on the value ran to
    # the budget as with closing off (a strict value under minLength came out too short).
    import httpx

    family = family_servers.get("qwen3_moe")

    def body(budget: int, closing: bool, min_length: int) -> dict[str, Any]:
        parameters = {
            "type": "object",
            "properties": {"a": {"type": "string", "minLength": min_length}},
            "required": ["a"],
            "additionalProperties": False,
        }
        return {
            "temperature": 1.0,
            "seed": budget,
            "max_tokens": budget,
            "afm_close_on_length": closing,
            "messages": [{"role": "user", "content": "name note"}],
            "tools": [
                {"type": "function", "function": {"name": "f", "strict": True, "parameters": parameters}}
            ],
            "tool_choice": "required",
        }

    def value(budget: int, closing: bool) -> str:
        r = httpx.post(f"{family.url}/v1/chat/completions", json=body(budget, closing, 0), timeout=120)
        (call,) = r.json()["choices"][0]["message"]["tool_calls"]
        return str(json.loads(call["function"]["arguments"])["a"])

    for budget in (49, 54, 61):
        cut, closed = value(budget, closing=False), value(budget, closing=True)
        # The closer ends the value where the end tags still fit (about 12 tokens here).
        assert cut.startswith(closed) and len(closed) < len(cut), (budget, cut, closed)
    for budget in (49, 61):
        outcome = send(family, FuzzCase(body(budget, True, 12)))
        assert outcome.status in (200, 400) and not outcome.violations, outcome.report()


ROOT_REF = {
    "$ref": "#/definitions/element",
    "definitions": {
        "element": {
            "type": "object",
            "properties": {"type": {"type": "string"}, "child": {"$ref": "#/definitions/element"}},
            "required": ["type"],
            "additionalProperties": False,
        }
    },
    "type": "object",
}


@pytest.mark.parametrize(
    ("syntax", "stray", "whole"),
    [
        ("glm45", "<tool_call>f\n<arg_key>zz", "<tool_call>f\n<arg_key>type</arg_key>\n<arg_value>div"),
        ("qwen3_coder", "<tool_call>\n<function=f>\n<parameter=z",
         "<tool_call>\n<function=f>\n<parameter=type"),
        ("pythonic", "[f(zz", '[f(type="div")]'),
    ],
)
def test_a_strict_tool_whose_parameters_are_a_root_ref_takes_only_its_parameters(
    tokenizer: Any, syntax: str, stray: str, whole: str
) -> None:
    # A dev-set schema whose root is '$ref: #/definitions/...': the syntaxes that write
    # parameters one by one read the root's 'properties', found none, and took any name
    # (glm4_moe: strict arguments {"iinKh7Ucn4RE5WhD": ...}, 4 of 154 responses).
    from afm_struct.tools import plan_tools

    tool = {"type": "function", "function": {"name": "f", "strict": True, "parameters": ROOT_REF}}
    plan = plan_tools(tokenizer, [tool], "required", False, format_name=syntax,
                      messages=[{"role": "user", "content": "hi"}])

    def takes(text: str) -> bool:
        matcher = plan.constraint.new_matcher()
        return all(matcher.advance(t) for t in tokenizer.encode(text))

    assert takes(whole), whole
    assert not takes(stray), stray


def _cmoa_schema() -> dict[str, Any]:
    from ..dev_set import dev_files

    found = [p for p in dev_files() if p.name == "Github_hard---o23555.json"]
    if not found:
        pytest.skip("the shared JSONSchemaBench dev set is not beside this checkout")
    return json.loads(found[0].read_text())["schema"]


@pytest.mark.parametrize("thinking", [True, False])
@pytest.mark.parametrize("budget", [153, 400])
def test_a_strict_schema_the_closing_search_gave_up_on_is_closed_or_refused(
    family_servers: FamilyServers, budget: int, thinking: bool
) -> None:
    # Issue 34.2 (survey_2000's one class left): the dev set's CMOA provenance record on qwen3.
    # Its byte-level vocabulary spells every value a character at a time, and the closing search
    # found no plan from the start (it merged '"0:' into '"00' in a uri string it entered
    # through forced text, tests/grammar/test_closing.py): the request was neither refused nor
    # closed, and ended 'length' unparseable ('... "direct_transfer": fals', or '' with the
    # thinking block still open).  Now it is refused below the shortest output, or closed.
    body: dict[str, Any] = {
        "temperature": 1.5,
        "seed": 168225439,
        "max_tokens": budget,
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "city weather x id value a count"},
        ],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "answer", "strict": True, "schema": _cmoa_schema()},
        },
    }
    if not thinking:
        body["chat_template_kwargs"] = {"enable_thinking": False}
    outcome = send(family_servers.get("qwen3"), FuzzCase(body))
    assert outcome.status in (200, 400) and not outcome.violations, outcome.report()
    if budget == 400:
        assert outcome.status == 200 and outcome.finish == "length", outcome.report()
