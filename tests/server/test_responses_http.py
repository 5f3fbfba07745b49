"""POST /v1/responses over real HTTP on the scripted model: the event sequence, the response
object, output formats, tools, reasoning, logprobs, limits, headers and refusals."""

from __future__ import annotations

import json
import typing

import pytest
from openai.types.responses import Response, ResponseStreamEvent

from afm_struct.testing import Script, scripted_loaded_model
from server.live import start_server

from .responses_client import check_sequence, post, stream_events, types

# The SDK's event model of each event type.
EVENT_MODELS = {model.model_fields["type"].annotation.__args__[0]: model
                for model in typing.get_args(typing.get_args(ResponseStreamEvent)[0])}
TEXT_START = ["response.created", "response.in_progress", "response.output_item.added",
              "response.content_part.added"]
TEXT_END = ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"], "additionalProperties": False}}
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


def schema_format(schema: dict, strict: bool = True) -> dict:
    return {"format": {"type": "json_schema", "name": "person", "schema": schema, "strict": strict}}


def validated(events: list[dict]) -> None:
    """Every event parses as the openai SDK's stream event of its type."""
    for event in events:
        model = EVENT_MODELS[event["type"]]
        assert model.model_validate(event).type == event["type"]
    check_sequence(events)


def test_streamed_text_event_sequence(serve):
    live = serve("Hello there, world!")
    response, events = stream_events(live.url, {"input": "hi"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert "x-request-id" in response.headers and "x-grammar-constraints" not in response.headers
    kinds = types(events)
    assert kinds[:4] == TEXT_START and kinds[-4:] == [*TEXT_END, "response.completed"]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    validated(events)
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == "Hello there, world!"
    final = Response.model_validate(events[-1]["response"])
    assert final.status == "completed" and final.output_text == text
    assert final.usage.output_tokens > 0 and final.usage.output_tokens_details.reasoning_tokens == 0
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []
    item = events[2]["item"]
    assert all(e.get("item_id", item["id"]) == item["id"] for e in events[3:-1])


def test_non_streamed_body_is_a_response_object(serve):
    live = serve("Hello there, world!")
    r = post(live.url, {"input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
                        "instructions": "Be brief.", "metadata": {"run": "7"}, "temperature": 0.5,
                        "top_p": 0.9, "seed": 3})
    assert r.status_code == 200, r.text
    body = Response.model_validate(r.json())
    assert body.id.startswith("resp_") and body.object == "response" and body.status == "completed"
    assert body.output_text == "Hello there, world!"
    assert body.metadata == {"run": "7"} and body.instructions == "Be brief."
    assert body.temperature == 0.5 and body.top_p == 0.9
    assert body.output[0].type == "message" and body.output[0].status == "completed"
    assert body.usage.total_tokens == body.usage.input_tokens + body.usage.output_tokens


def test_json_schema_strict_is_enforced_and_not_flagged(serve):
    live = serve('{"name": "Ada", "age": 36}')
    r = post(live.url, {"input": "Ada, 36", "text": schema_format(PERSON)})
    assert r.status_code == 200 and "x-grammar-constraints" not in r.headers
    assert json.loads(r.json()["output"][0]["content"][0]["text"]) == {"name": "Ada", "age": 36}
    assert r.json()["text"]["format"]["name"] == "person"


def test_downgraded_header_exactly_when_a_strict_schema_is_not_enforced_exactly(serve):
    # a lookbehind is outside what a token mask enforces exactly (a lookahead after ^ is restated)
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^(?<!x)[a-z]+$"}},
              "required": ["code"]}
    live = serve('{"code": "abc"}')
    strict = post(live.url, {"input": "x", "text": schema_format(schema), "max_output_tokens": 40})
    assert strict.status_code == 200 and strict.headers.get("x-grammar-constraints") == "downgraded"
    loose = post(live.url, {"input": "x", "text": schema_format(schema, strict=False),
                            "max_output_tokens": 40})
    assert loose.status_code == 200 and "x-grammar-constraints" not in loose.headers
    response, _ = stream_events(live.url, {"input": "x", "text": schema_format(schema),
                                           "max_output_tokens": 40})
    assert response.headers.get("x-grammar-constraints") == "downgraded"


def test_json_object_format(serve):
    live = serve('{"ok": true}')
    r = post(live.url, {"input": "x", "text": {"format": {"type": "json_object"}}})
    assert json.loads(r.json()["output"][0]["content"][0]["text"]) == {"ok": True}


def test_function_call_streamed_events_and_body(serve):
    live = serve(CALL)
    _, events = stream_events(live.url, {"input": "weather?", "tools": [WEATHER]})
    validated(events)
    kinds = types(events)
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-3:] == ["response.function_call_arguments.done", "response.output_item.done",
                          "response.completed"]
    assert set(kinds[3:-3]) == {"response.function_call_arguments.delta"}
    added, done = events[2]["item"], events[-2]["item"]
    assert added["type"] == "function_call" and added["status"] == "in_progress" and added["arguments"] == ""
    assert done["status"] == "completed" and done["call_id"] == added["call_id"]
    assert done["name"] == "get_weather"
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta")
    assert json.loads(deltas) == json.loads(done["arguments"]) == {"city": "Paris"}
    body = Response.model_validate(post(live.url, {"input": "weather?", "tools": [WEATHER]}).json())
    (call,) = body.output
    assert call.type == "function_call" and json.loads(call.arguments) == {"city": "Paris"}
    assert body.tools[0].name == "get_weather" and body.tools[0].strict is True


def test_parallel_tool_calls_false_keeps_one_call(serve):
    live = serve(CALL + "\n" + CALL.replace("Paris", "Rome"))
    both = post(live.url, {"input": "x", "tools": [WEATHER]}).json()["output"]
    one = post(live.url, {"input": "x", "tools": [WEATHER], "parallel_tool_calls": False}).json()
    assert [i["type"] for i in both] == ["function_call", "function_call"]
    assert [i["type"] for i in one["output"]] == ["function_call"] and one["parallel_tool_calls"] is False


@pytest.mark.parametrize("choice", ["required", {"type": "function", "name": "get_weather"},
                                    {"type": "allowed_tools", "mode": "required",
                                     "tools": [{"type": "function", "name": "get_weather"}]}])
def test_tool_choice_forms_force_the_call(serve, choice):
    live = serve("no call here, just text " + CALL)
    other = {**WEATHER, "name": "get_time"}
    # The script's text is masked away, so the sampler picks among the grammar's tokens: at the
    # default temperature it may open a second call (parallel calls are allowed); each must be
    # a call, and the named forms allow get_weather alone.
    body = post(live.url, {"input": "x", "tools": [WEATHER, other], "tool_choice": choice}).json()
    kinds = [i["type"] for i in body["output"]]
    assert kinds and set(kinds) == {"function_call"}, body
    names = {i["name"] for i in body["output"]}
    assert names <= {"get_weather", "get_time"} if choice == "required" else names == {"get_weather"}
    assert body["tool_choice"] == choice


def test_tool_choice_none_answers_in_text(serve):
    live = serve("plain answer")
    body = post(live.url, {"input": "x", "tools": [WEATHER], "tool_choice": "none"}).json()
    assert body["output"][0]["type"] == "message"


CUSTOM_REGEX = {"type": "custom", "name": "set_code", "description": "Set the code",
                "format": {"type": "grammar", "syntax": "regex", "definition": "[A-Z]{2}-[0-9]{2}"}}


def test_custom_tool_with_a_regex_is_constrained_and_shown_as_input(serve):
    # the script tries lowercase and more digits: the grammar keeps the input to the pattern
    live = serve('<tool_call>\n{"name": "set_code", "arguments": {"input": "AB-12"}}\n</tool_call>')
    _, events = stream_events(live.url, {"input": "x", "tools": [CUSTOM_REGEX], "tool_choice": "required"})
    validated(events)
    kinds = types(events)
    assert "response.custom_tool_call_input.done" in kinds
    assert "response.function_call_arguments.delta" not in kinds
    done = events[-2]["item"]
    assert done["type"] == "custom_tool_call" and done["input"] == "AB-12" and done["name"] == "set_code"
    assert "".join(e["delta"] for e in events
                   if e["type"] == "response.custom_tool_call_input.delta") == "AB-12"
    assert events[-1]["response"]["tools"][0]["format"]["definition"] == "[A-Z]{2}-[0-9]{2}"


def test_custom_tool_input_breaks_the_pattern_only_where_the_grammar_allows(serve):
    live = serve('<tool_call>\n{"name": "set_code", "arguments": {"input": "ab-123"}}\n</tool_call>')
    body = post(live.url, {"input": "x", "tools": [CUSTOM_REGEX], "tool_choice": "required",
                           "max_output_tokens": 60}).json()
    import re
    (call,) = body["output"]
    assert re.fullmatch("[A-Z]{2}-[0-9]{2}", call["input"]), call


def test_custom_text_tool_takes_free_text_with_escapes(serve):
    text = 'say "hi"\nthen \\ leave'
    args = json.dumps({"input": text})
    live = serve('<tool_call>\n{"name": "note", "arguments": ' + args + "}\n</tool_call>")
    tool = {"type": "custom", "name": "note"}
    _, events = stream_events(live.url, {"input": "x", "tools": [tool]})
    validated(events)
    assert events[-2]["item"]["input"] == text
    assert "".join(e["delta"] for e in events if e["type"] == "response.custom_tool_call_input.delta") == text


def test_reasoning_is_a_reasoning_item_and_counted(serve, tokenizer):
    live = serve("<think>hmm, let me see</think>Hello there!", reasoning="think")
    _, events = stream_events(live.url, {"input": "x"})
    validated(events)
    kinds = types(events)
    assert kinds[2:5] == ["response.output_item.added", "response.content_part.added",
                          "response.reasoning_text.delta"]
    assert "response.reasoning_text.done" in kinds
    final = events[-1]["response"]
    assert [i["type"] for i in final["output"]] == ["reasoning", "message"]
    assert final["output"][0]["content"][0]["text"] == "hmm, let me see"
    assert final["output"][1]["content"][0]["text"] == "Hello there!"
    # The generator's count (tests/server/test_metrics.py says which tokens), not a re-tokenized text.
    opening = len(tokenizer.encode("<think>")) - 1
    assert final["usage"]["output_tokens_details"]["reasoning_tokens"] == len(
        tokenizer.encode("<think>hmm, let me see</think>")) - opening


def test_logprobs_by_include_with_top_logprobs(serve):
    live = serve("Hello there, world!")
    request = {"input": "x", "include": ["message.output_text.logprobs"], "top_logprobs": 2}
    _, events = stream_events(live.url, request)
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert deltas and all(e["logprobs"] for e in deltas)
    assert all(len(lp["top_logprobs"]) == 2 for e in deltas for lp in e["logprobs"])
    part = events[-1]["response"]["output"][0]["content"][0]
    assert "".join(lp["token"] for lp in part["logprobs"]) == part["text"]
    body = post(live.url, request).json()
    assert body["output"][0]["content"][0]["logprobs"] == part["logprobs"]
    assert post(live.url, {"input": "x"}).json()["output"][0]["content"][0]["logprobs"] == []


def test_max_output_tokens_cut_is_incomplete(serve):
    live = serve("word " * 50)
    _, events = stream_events(live.url, {"input": "x", "max_output_tokens": 4})
    validated(events)
    assert events[-1]["type"] == "response.incomplete"
    final = events[-1]["response"]
    assert final["status"] == "incomplete"
    assert final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["output"][0]["status"] == "incomplete" and final["usage"]["output_tokens"] == 4
    body = post(live.url, {"input": "x", "max_output_tokens": 4}).json()
    assert body["status"] == "incomplete" and body["incomplete_details"]["reason"] == "max_output_tokens"


def test_a_cut_strict_schema_is_closed_so_it_parses(serve):
    live = serve('{"name": "' + "A" * 300 + '", "age": 36}')
    body = post(live.url, {"input": "x", "text": schema_format(PERSON), "max_output_tokens": 20}).json()
    assert body["status"] == "incomplete"
    assert set(json.loads(body["output"][0]["content"][0]["text"])) == {"name", "age"}


def test_failure_after_headers_is_an_error_event_then_response_failed(serve):
    live = serve(Script("Hello there, world! and more", fail_at=3))
    _, events = stream_events(live.url, {"input": "x"})
    validated(events)
    kinds = types(events)
    assert kinds[-1] == "response.failed" and "error" in kinds
    assert kinds.index("error") < kinds.index("response.output_item.done")
    error = events[kinds.index("error")]
    assert error["message"] and error["code"]
    final = events[-1]["response"]
    assert final["status"] == "failed" and final["error"]["message"] == error["message"]
    assert final["error"]["code"] == "server_error" and error["code"] == "generation_failed"
    r = post(live.url, {"input": "x"})
    assert r.status_code == 500 and r.json()["error"]["message"]


def test_items_passed_back_reach_the_prompt(serve, tokenizer):
    def answer(ids: list[int]) -> str:
        prompt = tokenizer.decode(ids)
        seen = [w for w in ("SUNNY-42", "get_weather", "THOUGHT-7", "BE-TERSE") if w in prompt]
        return " ".join(seen) or "nothing"

    live = serve(Script(answer))
    items = [
        {"role": "user", "content": "weather in Paris?"},
        {"type": "reasoning", "id": "rs_1", "summary": [],
         "content": [{"type": "reasoning_text", "text": "THOUGHT-7"}]},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather",
         "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "SUNNY-42"},
    ]
    body = post(live.url, {"input": items, "instructions": "BE-TERSE", "tools": [WEATHER]}).json()
    text = body["output"][0]["content"][0]["text"]
    assert {"SUNNY-42", "get_weather", "BE-TERSE"} <= set(text.split()), text


@pytest.mark.parametrize(("extra", "param"), [
    ({"background": True}, "background"),
    ({"conversation": "conv_1"}, "conversation"),
    ({"truncation": "sometimes"}, "truncation"),
    ({"max_tool_calls": 0}, "max_tool_calls"),
    ({"presence_penalty": 2.5}, "presence_penalty"),
    ({"frequency_penalty": -3}, "frequency_penalty"),
    ({"prompt": {"id": "pmpt_1"}}, "prompt"),
    ({"tools": [{"type": 7}]}, "tools.0.type"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x"}]}]},
     "input.0.content.0.type"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
     "input.0.content.0.type"),
    ({"frobnicate": 1}, "frobnicate"),
    ({"include": ["file_search_call.results"]}, "include.0"),
    ({"reasoning": {"summary": "verbose"}}, "reasoning.summary"),
    ({"reasoning": {"effort": "enormous"}}, "reasoning.effort"),
    ({"text": {"format": {"type": "json_schema", "schema": PERSON}}}, "text.format.name"),
    ({"text": {"format": {"type": "xml"}}}, "text.format.type"),
    ({"tools": [{"type": "custom", "name": "c", "format": {"type": "grammar", "syntax": "lark",
                                                             "definition": "start: \"a\"..\"z\""}}]},
     "tools.0.format.definition"),
    ({"tools": [{"type": "custom", "name": "c", "format": {"type": "grammar", "syntax": "ebnf",
                                                             "definition": "start: \"a\""}}]},
     "tools.0.format.syntax"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice.name"),
    ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input.0.type"),
    ({"metadata": {"k": 5}}, "metadata.k"),
    ({"text": {"format": {"type": "json_schema", "name": "p", "schema": PERSON, "strictly": True}}},
     "text.format.strictly"),
    ({"tools": [{**WEATHER, "defer_loading": True}]}, "tools.0.defer_loading"),
    ({"tools": [{"type": "custom", "name": "c", "grammar": "x"}]}, "tools.0.grammar"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
])
def test_unsupported_or_bad_fields_are_400_naming_the_field(serve, extra, param):
    live = serve("Hello")
    r = post(live.url, {"input": "hi", **extra})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["message"] and error["type"] == "invalid_request_error"


def test_previous_response_id_without_a_store_is_404_in_openais_shape(serve):
    live = serve("Hello")
    r = post(live.url, {"input": "hi", "previous_response_id": "resp_unknown"})
    assert r.status_code == 404
    error = r.json()["error"]
    assert error["param"] == "previous_response_id" and "resp_unknown" in error["message"]
    # without a store the response is answered and says it was not kept
    assert post(live.url, {"input": "hi", "store": True}).json()["store"] is False


def test_unknown_model_is_404(serve):
    r = post(serve("x").url, {"input": "hi", "model": "gpt-9"})
    assert r.status_code == 404 and r.json()["error"]["param"] == "model"


@pytest.mark.parametrize("stream", [False, True])
def test_a_strict_schema_with_tools_is_enforced_as_the_answer(serve, stream):
    live = serve('{"name": "Ada", "age": 36}')
    request = {"input": "x", "text": schema_format(PERSON), "tools": [WEATHER], "max_output_tokens": 40}
    if stream:
        response, events = stream_events(live.url, request)
        validated(events)
        deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
        final = events[-1]["response"]
        assert len(deltas) > 1  # enforced: streamed as generated, not held back to the end
    else:
        response = post(live.url, request)
        final = response.json()
    assert "x-grammar-constraints" not in response.headers
    assert json.loads(final["output"][0]["content"][0]["text"]) == {"name": "Ada", "age": 36}


def test_with_tools_prose_cannot_replace_the_schemas_answer(serve):
    # the model wants prose around its JSON: the grammar allows the schema's answer or a call
    live = serve('Sure! Here it is: {"name": "Ada", "age": 36}')
    body = post(live.url, {"input": "x", "text": schema_format(PERSON), "tools": [WEATHER],
                           "max_output_tokens": 40}).json()
    for item in body["output"]:
        if item["type"] == "message":
            value = json.loads(item["content"][0]["text"])
            assert set(value) == {"name", "age"} and isinstance(value["age"], int)
        else:
            assert item["type"] == "function_call" and set(json.loads(item["arguments"])) == {"city"}


def test_a_strict_schema_with_tools_still_allows_the_call(serve):
    live = serve(CALL)
    body = post(live.url, {"input": "x", "text": schema_format(PERSON), "tools": [WEATHER]}).json()
    assert [i["type"] for i in body["output"]] == ["function_call"]
    assert json.loads(body["output"][0]["arguments"]) == {"city": "Paris"}


# The switch as Qwen3's template reads it (``enable_thinking``), shown in the prompt before the
# assistant header (where the scripted model finds the prompt's end).
SWITCH_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                   "{% if enable_thinking is defined %}[thinking={{ enable_thinking }}]{% endif %}"
                   "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.mark.parametrize(("effort", "switch"), [("none", "False"), ("minimal", "False"), ("low", "True"),
                                                ("high", "True"), (None, "unset")])
def test_reasoning_effort_drives_the_templates_thinking_switch(tokenizer, effort, switch) -> None:
    tok = tokenizer.with_chat_template(SWITCH_TEMPLATE)

    def answer(ids: list[int]) -> str:
        prompt = tok.decode(ids)
        return prompt.split("[thinking=")[1].split("]")[0] if "[thinking=" in prompt else "unset"

    live = start_server(scripted_loaded_model(tok, Script(answer)))
    try:
        request: dict = {"input": "hi", **({"reasoning": {"effort": effort}} if effort else {})}
        body = post(live.url, request).json()
        assert body["output"][-1]["content"][0]["text"] == switch
        assert body["reasoning"]["effort"] == effort
        # chat_template_kwargs wins over the effort's switch
        forced = post(live.url, {**request, "chat_template_kwargs": {"enable_thinking": True}}).json()
        assert forced["output"][-1]["content"][0]["text"] == "True"
    finally:
        live.stop()


def test_profile_rides_the_final_response_object(serve):
    live = serve("Hello there, world!")
    _, events = stream_events(live.url, {"input": "hi"}, {"X-AFM-Profile": "true"})
    assert events[-1]["type"] == "response.completed" and "afm_profile" in events[-1]["response"]
    body = post(live.url, {"input": "hi"}, {"X-AFM-Profile": "true"}).json()
    assert body["afm_profile"]["request_id"]
    assert "afm_profile" not in post(live.url, {"input": "hi"}).json()

