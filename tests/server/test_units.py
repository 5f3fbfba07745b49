"""Pure pieces of the server: delta routing, JSON sanitizing, request mapping, the registry."""

from __future__ import annotations

import asyncio
import json

import pytest

from afm_struct.errors import InvalidRequestError, NotFoundError, SchemaError, UnknownToolError
from afm_struct.serving.plan import OutputFormat
from afm_struct.tools import Choice, parse_choice, parse_tools
from afm_struct.turn.events import Reasoning, Text
from server.cancel import InflightRegistry, RequestIdConflictError
from server.channels import ContentRouter
from server.chat.adapter import check_n, output_format, sampling_params, template_messages
from server.request import check_model
from server.schemas import ChatCompletionRequest
from server.structured import plan_structured, sanitize_json_text


def _route(router: ContentRouter, pieces: list[str]) -> tuple[str, str]:
    content, reasoning = "", ""
    for e in [*(x for p in pieces for x in router.feed(p)), *router.finish()]:
        content += e.text if isinstance(e, Text) else ""
        reasoning += e.text if isinstance(e, Reasoning) else ""
    return content, reasoning


@pytest.mark.parametrize("split", [[ "<think>plan</think>\n\nanswer"], list("<think>plan</think>\n\nanswer"),
                                   ["<thi", "nk>pl", "an</th", "ink>", "\n", "answer"]])
def test_reasoning_is_split_into_its_own_channel_across_fragments(split: list[str]) -> None:
    assert _route(ContentRouter(split_reasoning=True), split) == ("answer", "plan")


def test_reasoning_split_off_keeps_tags_in_content() -> None:
    assert _route(ContentRouter(), ["<think>x</think>y"]) == ("<think>x</think>y", "")


def test_a_tag_cut_at_the_end_is_dropped_a_lone_character_is_text() -> None:
    # A thinking tag is structure, never text, also when the end cut it (issue 33).
    assert _route(ContentRouter(split_reasoning=True), ["a <thi"]) == ("a ", "")
    assert _route(ContentRouter(split_reasoning=True), ["a <"]) == ("a <", "")


@pytest.mark.parametrize(("raw", "expected"), [
    ('```json\n{"a": 1}\n```', '{"a": 1}'),
    ('Sure! Here it is:\n```json\n{"a": [1, 2]}\n```\nHope it helps.', '{"a": [1, 2]}'),
    ('  {"a": 1}  ', '{"a": 1}'),
    ('The answer is {"b": "}"} ok', '{"b": "}"}'),
    ("```\n[1, 2]\n```", "[1, 2]"),
])
def test_sanitize_returns_unfenced_json(raw: str, expected: str) -> None:
    out = sanitize_json_text(raw)
    assert out == expected and "```" not in out
    json.loads(out)


def test_request_mapping_and_admission_checks() -> None:
    req = ChatCompletionRequest.model_validate({
        "messages": [{"role": "developer", "content": [{"type": "text", "text": "be "},
                                                       {"type": "text", "text": "brief"}]},
                     {"role": "user", "content": "hi"}],
        "stop": "END", "max_completion_tokens": 7, "temperature": 0, "seed": 3, "unknown_field": 1})
    msgs = template_messages(req.messages)
    assert msgs[0] == {"role": "system", "content": "be brief"}
    params = sampling_params(req, default_max_tokens=100)
    assert params.stop == ("END",) and params.max_tokens == 7 and params.temperature == 0 and params.seed == 3
    with pytest.raises(InvalidRequestError) as exc:
        check_n(2)
    assert exc.value.param == "n"
    with pytest.raises(NotFoundError):
        check_model("gpt-4o", ("scripted",))
    assert check_model(None, ("scripted", "b")) == "scripted" and check_model("b", ("scripted", "b")) == "b"
    bad = ChatCompletionRequest.model_validate(
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})
    with pytest.raises(InvalidRequestError):
        template_messages(bad.messages)


def test_tool_choice_must_name_a_declared_tool() -> None:
    """The server parses the pydantic request's tools once (what prepare() does)."""
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
    ok = ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "x"}], "tools": tools,
                                               "tool_choice": {"type": "function",
                                                               "function": {"name": "read_file"}}})
    defs = parse_tools(ok.tools)
    assert [t.name for t in defs] == ["read_file"]
    assert parse_choice(ok.tool_choice, defs) == Choice("function", "read_file")
    bad = ok.model_copy(update={"tool_choice": ok.tool_choice.model_copy(
        update={"function": ok.tool_choice.function.model_copy(update={"name": "rm"})})})
    with pytest.raises(UnknownToolError):
        parse_choice(bad.tool_choice, defs)
    assert parse_choice("none", defs) == Choice("none")
    # Parsed values pass through unchanged and are checked again against the tools.
    assert parse_tools(defs) == defs
    with pytest.raises(UnknownToolError):
        parse_choice(Choice("function", "rm"), defs)
    with pytest.raises(InvalidRequestError, match="tools is empty"):
        parse_choice(ok.tool_choice, ())


def test_invalid_schema_is_a_400_with_path(tokenizer) -> None:
    req = ChatCompletionRequest.model_validate({
        "messages": [{"role": "user", "content": "x"}],
        "response_format": {"type": "json_schema", "json_schema": {
            "name": "t", "strict": True, "schema": {"type": "object", "properties": {"a": {"type": 5}}}}}})
    # The grammar compiler checks the meta-schema and reports the JSON path of the problem.
    with pytest.raises(SchemaError) as exc:
        asyncio.run(plan_structured(tokenizer, output_format(req.response_format)))
    assert exc.value.status == 400 and "$.properties.a.type" in exc.value.message
    assert exc.value.param == "response_format.json_schema.schema"


@pytest.mark.parametrize("schema", [{"type": "object", "properties": {"a": {"type": 5}}},  # meta-schema
                                    {"type": "integer", "minimum": 3, "maximum": 1}])  # no instance
def test_schema_errors_name_the_path_the_output_format_came_from(tokenizer, schema) -> None:
    """The core names where another protocol carries its schema (the Responses API's
    ``text.format.schema``), not chat's ``response_format``: the param comes with the format."""
    fmt = OutputFormat("json_schema", schema=schema, strict=True, name="t", param="text.format.schema")
    with pytest.raises(SchemaError) as exc:
        asyncio.run(plan_structured(tokenizer, fmt))
    assert exc.value.param == "text.format.schema"


def test_registry_lifecycle() -> None:
    reg = InflightRegistry(remember=2)
    entry = reg.register("o", "a")
    with pytest.raises(RequestIdConflictError) as exc:
        reg.register("o", "a")
    assert exc.value.status == 409
    other = reg.register("p", "a")  # another owner's "a" is another request
    assert reg.cancel("o", "a") is None  # accepted before a handle exists; applied on attach
    assert reg.complete(entry) is True
    err = reg.cancel("o", "a")
    assert err is not None and err.status == 404 and "completed" in err.message
    err = reg.cancel("q", "a")  # neither in flight nor completed for this owner
    assert err is not None and "unknown" in err.message
    err = reg.cancel("o", "never")
    assert err is not None and "unknown" in err.message
    assert reg.complete(other) is False  # the cancel of o's "a" did not reach p's
    again = reg.register("o", "a")  # an ID may be reused once its request is over
    assert reg.complete(again) is False


def test_router_can_start_inside_a_block_the_prompt_opened() -> None:
    router = ContentRouter(split_reasoning=True, tags=("<thinking>", "</thinking>"), start_in_reasoning=True)
    assert _route(router, ["still thinking", "</thinking>", " done"]) == ("done", "still thinking")
