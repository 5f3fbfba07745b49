"""``POST /v1/completions`` over real HTTP on the scripted model: the raw prompt (no chat
template, special-token text read as tokens), the legacy ``text_completion`` shapes streamed and
not, echo, legacy logprobs, errors before and after the headers, cancel by request ID (owners
respected), and the openai SDK's ``completions.create``."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from afm_struct.testing import Script

from .conftest import decode, sse_payloads

LONG = " ".join(f"w{i}" for i in range(400))
KEY_A, KEY_B = "key-alpha-0123456789", "key-bravo-0123456789"


def _post(url: str, body: dict[str, Any], **kw: Any) -> httpx.Response:
    return httpx.post(f"{url}/v1/completions", json=body, timeout=60, **kw)


def _stream(url: str, body: dict[str, Any]) -> tuple[httpx.Response, list[Any]]:
    with httpx.stream("POST", f"{url}/v1/completions", json={"stream": True, **body}, timeout=60) as r:
        assert r.status_code == 200, r.read()
        return r, decode(sse_payloads(r.iter_lines()))


def _echo_prompt(tokenizer: Any) -> Script:
    """A model that answers with the text of the prompt it was given."""
    return Script(lambda ids: "<<" + tokenizer.decode(ids) + ">>")


def test_the_prompt_is_raw_no_chat_template(serve, tokenizer) -> None:
    live = serve(_echo_prompt(tokenizer))
    r = _post(live.url, {"prompt": "Once upon a time", "max_tokens": 200})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-")
    choice = body["choices"][0]
    # exactly the prompt reached the model: no template turns around it
    assert choice["text"] == "<<Once upon a time>>"
    assert choice["finish_reason"] == "stop" and choice["index"] == 0 and choice["logprobs"] is None
    usage = body["usage"]
    assert usage["prompt_tokens"] == len(tokenizer.encode("Once upon a time"))
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_special_token_text_in_a_raw_prompt_is_read_as_the_token(serve, tokenizer) -> None:
    """The caller writes the whole prompt, its turns included (vLLM's rule): ``<|im_start|>``
    typed in a completions prompt is the control token, unlike in a chat message."""
    special = tokenizer.hf.convert_tokens_to_ids("<|im_start|>")
    live = serve(Script(lambda ids: "special" if special in ids else "plain"))
    prompt = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert _post(live.url, {"prompt": prompt}).json()["choices"][0]["text"] == "special"
    assert _post(live.url, {"prompt": "im_start user hi"}).json()["choices"][0]["text"] == "plain"


def test_list_of_one_prompt_and_refused_prompt_forms(serve, tokenizer) -> None:
    live = serve(_echo_prompt(tokenizer))
    assert _post(live.url, {"prompt": ["abc"], "max_tokens": 50}).json()["choices"][0]["text"] == "<<abc>>"
    for prompt, code in ((["a", "b"], "unsupported_value"), ([1, 2, 3], "unsupported_value"),
                         ([[1, 2]], "unsupported_value"), ([], "invalid_value")):
        r = _post(live.url, {"prompt": prompt})
        assert r.status_code == 400, (prompt, r.text)
        err = r.json()["error"]
        assert err["param"] == "prompt" and err["code"] == code, err


@pytest.mark.parametrize(("field", "value", "param"), [
    ("n", 2, "n"), ("best_of", 3, "best_of"), ("suffix", "tail", "suffix"), ("logprobs", 21, "logprobs"),
    ("model", "nope", "model"), ("temperature", 5, "temperature"),
])
def test_unsupported_or_bad_fields_are_400_naming_them(serve, field, value, param) -> None:
    live = serve()
    r = _post(live.url, {"prompt": "hi", field: value})
    assert r.status_code in (400, 404), r.text
    assert r.json()["error"]["param"] == param


def test_echo_with_logprobs_is_refused(serve) -> None:
    r = _post(serve().url, {"prompt": "hi", "echo": True, "logprobs": 1})
    assert r.status_code == 400 and r.json()["error"]["param"] == "echo"


def test_empty_prompt_is_a_400_not_a_crash(serve) -> None:
    r = _post(serve().url, {"prompt": ""})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt", r.text


def test_max_tokens_stop_and_echo(serve) -> None:
    live = serve("alpha beta gamma delta epsilon zeta eta theta")
    cut = _post(live.url, {"prompt": "Q:", "max_tokens": 2}).json()["choices"][0]
    assert cut["finish_reason"] == "length" and "alpha beta gamma delta".startswith(cut["text"])
    stopped = _post(live.url, {"prompt": "Q:", "stop": [" gamma"], "max_tokens": 50}).json()["choices"][0]
    assert stopped["text"] == "alpha beta" and stopped["finish_reason"] == "stop"
    echoed = _post(live.url, {"prompt": "Q:", "echo": True, "stop": " gamma"}).json()["choices"][0]
    assert echoed["text"] == "Q:alpha beta"


def test_default_budget_is_16_tokens_as_openai(serve) -> None:
    r = _post(serve(LONG).url, {"prompt": "go"}).json()
    assert r["choices"][0]["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 16


def test_legacy_logprobs_shape(serve) -> None:
    live = serve("alpha beta gamma")
    body = _post(live.url, {"prompt": "Q:", "logprobs": 2, "echo": False}).json()
    lp = body["choices"][0]["logprobs"]
    text = body["choices"][0]["text"]
    assert set(lp) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
    n = len(lp["tokens"])
    assert n == body["usage"]["completion_tokens"] and n > 1
    assert len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == n
    assert "".join(lp["tokens"]) == text
    assert lp["text_offset"] == [sum(len(t) for t in lp["tokens"][:i]) for i in range(n)]
    for tok, logprob, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], strict=True):
        assert isinstance(logprob, float) and top[tok] == logprob and 1 <= len(top) <= 3


def test_stream_shapes_usage_and_logprobs(serve) -> None:
    live = serve("alpha beta gamma")
    _, events = _stream(live.url, {"prompt": "Q:", "logprobs": 0, "echo": False,
                                   "stream_options": {"include_usage": True}})
    assert all(e["object"] == "text_completion" and e["id"] == events[0]["id"] for e in events)
    pieces = [e["choices"][0] for e in events if e["choices"]]
    assert "".join(p["text"] for p in pieces) == "alpha beta gamma"
    assert [p["finish_reason"] for p in pieces][-1] == "stop"
    assert all(p["finish_reason"] is None for p in pieces[:-1])
    assert all(p["logprobs"] is not None and "".join(p["logprobs"]["tokens"]) == p["text"]
               for p in pieces[:-1])
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] > 0


def test_stream_echo_sends_the_prompt_first(serve) -> None:
    _, events = _stream(serve("alpha beta").url, {"prompt": "Say:", "echo": True})
    assert events[0]["choices"][0]["text"] == "Say:"
    assert "".join(e["choices"][0]["text"] for e in events if e["choices"]) == "Say:alpha beta"


def test_json_response_format_is_enforced_on_a_raw_prompt(serve) -> None:
    live = serve('Sure! {"a": 1} done')
    r = _post(live.url, {"prompt": "JSON:", "max_tokens": 40,
                         "response_format": {"type": "json_schema", "json_schema": {
                             "name": "x", "strict": True,
                             "schema": {"type": "object", "properties": {"a": {"type": "integer"}},
                                        "required": ["a"], "additionalProperties": False}}}})
    assert r.status_code == 200, r.text
    value = json.loads(r.json()["choices"][0]["text"])  # the mask steered prose into the schema
    assert list(value) == ["a"] and isinstance(value["a"], int)
    bad = _post(live.url, {"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "properties": {"a": {"type": "nope"}}}}}})
    assert bad.status_code == 400 and bad.json()["error"]["param"].startswith("response_format")


def test_mid_stream_failure_is_an_error_chunk_then_done(serve) -> None:
    live = serve(Script("one two three four five six", fail_at=3))
    _, events = _stream(live.url, {"prompt": "go", "stream_options": {"include_usage": True}})
    errors = [e for e in events if "error" in e]
    assert len(errors) == 1 and errors[0]["choices"][0]["finish_reason"] == "error"
    assert errors[0]["error"]["code"] == "generation_failed"
    assert errors[0]["error"]["message"] in errors[0]["choices"][0]["text"]
    assert events[-1]["choices"] == [] and "usage" in events[-1]


def test_failure_without_streaming_is_an_http_error(serve) -> None:
    r = _post(serve(Script("one two three four", fail_at=2)).url, {"prompt": "go"})
    assert r.status_code == 500 and r.json()["error"]["code"] == "generation_failed"


def test_cancel_by_request_id_and_owners(serve) -> None:
    live = serve(Script(LONG, delay_s=0.02), api_keys=(KEY_A, KEY_B))
    a, b = ({"Authorization": f"Bearer {k}"} for k in (KEY_A, KEY_B))
    with httpx.stream("POST", f"{live.url}/v1/completions", timeout=60,
                      json={"prompt": "go", "stream": True, "max_tokens": 300},
                      headers={"X-Request-ID": "cmp-1", **a}) as response:
        lines = response.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        other = httpx.post(f"{live.url}/v1/completions/cmp-1/cancel", headers=b)
        assert other.status_code == 404 and other.json()["cancelled"] is False
        assert other.json()["object"] == "text_completion.cancellation"
        mine = httpx.post(f"{live.url}/v1/completions/cmp-1/cancel", headers=a)
        assert mine.status_code == 200
        assert mine.json() == {"id": "cmp-1", "object": "text_completion.cancellation", "cancelled": True}
        rest = [line[6:] for line in lines if line.startswith("data: ")]
    events = decode([first[6:], *rest])
    assert events[-1]["choices"][0]["finish_reason"] == "cancelled"


def test_openai_sdk_completions_create(serve) -> None:
    live = serve("alpha beta gamma")
    client = openai.OpenAI(base_url=f"{live.url}/v1", api_key="x")
    done = client.completions.create(model=live.state.settings.model_names(live.loaded.info.id)[0],
                                     prompt="Q:", max_tokens=20, logprobs=1)
    assert done.choices[0].text == "alpha beta gamma" and done.choices[0].finish_reason == "stop"
    assert done.choices[0].logprobs.tokens and done.usage.completion_tokens > 0
    chunks = list(client.completions.create(model=done.model, prompt="Q:", stream=True,
                                            stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "alpha beta gamma"
    assert chunks[-1].usage is not None
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=done.model, prompt="Q:", n=2)
    assert info.value.body["param"] == "n"


def test_constraint_fields_of_other_servers_apply(serve) -> None:
    """vLLM's guided_choice / structured_outputs.regex and llama.cpp's grammar on a raw prompt,
    with the mode header; a constraint field this server does not know is refused, not dropped."""
    live = serve("maybe yes")
    r = _post(live.url, {"prompt": "Answer:", "max_tokens": 10, "guided_choice": ["yes", "no"]})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] in ("yes", "no")
    assert r.headers["x-afm-constraint-mode"] == "exact"
    r = _post(live.url, {"prompt": "N:", "max_tokens": 10, "structured_outputs": {"regex": "[1-9][0-9]{2}"}})
    assert r.status_code == 200 and len(r.json()["choices"][0]["text"]) == 3
    assert r.json()["choices"][0]["text"].isdigit()
    r = _post(live.url, {"prompt": "N:", "max_tokens": 10, "grammar": 'root ::= "a" | "b"'})
    assert r.status_code == 200 and r.json()["choices"][0]["text"] in ("a", "b"), r.text
    unknown = _post(live.url, {"prompt": "x", "guided_lark": "start: 'a'"})
    assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "guided_lark"
    both = _post(live.url, {"prompt": "x", "guided_regex": "a", "response_format": {"type": "json_object"}})
    assert both.status_code == 400 and both.json()["error"]["code"] == "conflicting_constraints"
    free = _post(live.url, {"prompt": "x"})
    assert "x-afm-constraint-mode" not in free.headers


def test_skip_special_tokens_as_vllm(serve) -> None:
    live = serve("a<|im_start|>b")
    assert _post(live.url, {"prompt": "x"}).json()["choices"][0]["text"] == "ab"
    shown = _post(live.url, {"prompt": "x", "skip_special_tokens": False}).json()["choices"][0]["text"]
    assert shown == "a<|im_start|>b"


def test_a_prompt_over_the_context_is_a_400_naming_prompt(serve) -> None:
    live = serve(context_length=64)
    long = _post(live.url, {"prompt": "word " * 200})
    assert long.status_code == 400 and long.json()["error"]["param"] == "prompt"
    assert long.json()["error"]["code"] == "context_length_exceeded"
    budget = _post(live.url, {"prompt": "word " * 40, "max_tokens": 40})
    assert budget.status_code == 400 and budget.json()["error"]["code"] == "context_length_exceeded"
