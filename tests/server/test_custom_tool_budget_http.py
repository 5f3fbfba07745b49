"""Custom tools (Responses API) cut by ``max_output_tokens``, over real HTTP with the openai SDK.

The rule of budget-aware closing (issue 34 part 2) holds for a custom tool's input as for a
function's arguments: the client gets the call with an input its format accepts whole, or a
400 ``max_tokens_too_small`` before anything is generated; never an input cut or closed only
as a JSON string.  The scripted model writes a long input, so small budgets cut it anywhere;
the Lark oracle is the ``lark`` package itself (an independent reading of the grammar), the
regex oracle Python's ``re``.  ``AFM_STRUCT_RANDOM_EXAMPLES=N`` runs N examples.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import lark
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from afm_struct.testing import Script, scripted_loaded_model
from server.live import start_server

EXAMPLES = int(os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES", "0")) or 24

NAME_LARK = 'start: "SELECT " /[a-z]+/ " FROM t"'
SQL_LARK = r'''
start: "SELECT " cols " FROM " NAME where?
cols: NAME (", " NAME)* | "*"
where: " WHERE " NAME " = " VALUE
NAME: /[a-z_]+/
VALUE: /"[^"\n]*"/ | /[0-9]+/
'''
CODE_REGEX = "[A-Z]{2}-[0-9]{2}"


def _tool(name: str, syntax: str, definition: str) -> dict[str, Any]:
    return {"type": "custom", "name": name,
            "format": {"type": "grammar", "syntax": syntax, "definition": definition}}


def _lark_accepts(definition: str) -> Callable[[str], bool]:
    parser = lark.Lark(definition, start="start", parser="earley", lexer="dynamic")

    def accepts(text: str) -> bool:
        try:
            parser.parse(text)
        except lark.exceptions.LarkError:
            return False
        return True
    return accepts


# name → (the tool, what the scripted model writes as its input, the oracle)
CASES: dict[str, tuple[dict[str, Any], str, Callable[[str], bool]]] = {
    "sql": (_tool("sql", "lark", NAME_LARK), "SELECT tblkeyname FROM t", _lark_accepts(NAME_LARK)),
    "run_sql": (_tool("run_sql", "lark", SQL_LARK),
                'SELECT name, age FROM people WHERE city = "Paris\\x"', _lark_accepts(SQL_LARK)),
    "set_code": (_tool("set_code", "regex", CODE_REGEX), "AB-12",
                 lambda text: re.fullmatch(CODE_REGEX, text) is not None),
}


@pytest.fixture(scope="module")
def client(tokenizer: Any) -> Iterator[openai.OpenAI]:
    """A scripted server whose model writes the call of the tool its prompt offers, with the
    input the prompt carries (``INPUT: {"input": ...}>>>``), the case's own by default."""
    def call(ids: list[int]) -> str:
        prompt = tokenizer.decode(ids)
        name = next(name for name in CASES if f'"{name}"' in prompt)
        given = re.search(r"INPUT: (\{.*\})>>>", prompt, re.S)
        arguments = given.group(1) if given else json.dumps({"input": CASES[name][1]})
        return '<tool_call>\n{"name": "' + name + '", "arguments": ' + arguments + "}\n</tool_call>"

    live = start_server(scripted_loaded_model(tokenizer, Script(call)))
    yield openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", max_retries=0, timeout=60)
    live.stop()


def _create(client: openai.OpenAI, tool: dict[str, Any], budget: int, stream: bool, text: str = "") -> Any:
    prompt = f"Write it. INPUT: {json.dumps({'input': text})}>>>" if text else "Write it"
    return client.responses.create(model="scripted", input=prompt, tools=[tool], tool_choice="required",
                                   max_output_tokens=budget, stream=stream)


def test_a_budget_that_cuts_the_lark_input_is_refused_up_front(client) -> None:
    """The stranger's case: 20 tokens reach into the input ('SELECT') but not past it; the
    call was answered with input 'SELECT', which the grammar refuses."""
    tool, _, _ = CASES["sql"]
    with pytest.raises(openai.BadRequestError) as refused:
        _create(client, tool, 20, stream=False)
    error = refused.value.body
    assert error["code"] == "max_tokens_too_small" and error["param"] == "max_output_tokens", error
    assert "max_output_tokens is 20," in error["message"]


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
          derandomize=not os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES"))
@given(case=st.sampled_from(sorted(CASES)), budget=st.integers(1, 44), stream=st.booleans(),
       extra=st.text(alphabet='abzAZ09 _,="\\\n\u00e9', max_size=12), at=st.integers(0, 60))
def test_a_cut_custom_call_is_valid_or_refused(client, case, budget, stream, extra, at) -> None:
    """``extra``: text the model tries to write at ``at`` inside the case's input (the grammar
    decides what of it is taken), so cuts fall at many places in many inputs."""
    tool, text, accepts = CASES[case]
    where = (case, budget, stream, extra, at)
    try:
        answer = _create(client, tool, budget, stream, text[:at] + extra + text[at:] if extra else "")
    except openai.BadRequestError as refused:
        error = refused.body
        assert (error["code"], error["param"]) == ("max_tokens_too_small", "max_output_tokens"), where
        return
    if stream:
        events = list(answer)
        deltas = "".join(e.delta for e in events if e.type == "response.custom_tool_call_input.delta")
        done = [e.input for e in events if e.type == "response.custom_tool_call_input.done"]
        response = events[-1].response
    else:
        response, deltas, done = answer, None, None
    # the call alone: a close tag the budget cut is markup, not a message ('</tool_call')
    assert [item.type for item in response.output] == ["custom_tool_call"], (where, response.output)
    (call,) = response.output
    assert call.name == case and accepts(call.input), (where, call.input)
    if stream:
        assert done == [call.input] and deltas == call.input, (where, deltas, done)


@pytest.mark.model
def test_the_strangers_request_on_the_embedded_model_is_refused_up_front(real_server) -> None:
    """The report as sent: 20 tokens were answered with input 'SELECT' (status incomplete)."""
    client = openai.OpenAI(base_url=f"{real_server.url}/v1", api_key="unused", max_retries=0, timeout=120)
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="SmolLM2-135M-Instruct", input="Write SQL", tools=[CASES["sql"][0]],
                                tool_choice="required", max_output_tokens=20)
    assert refused.value.body["code"] == "max_tokens_too_small", refused.value.body


@pytest.mark.parametrize("stream", [False, True])
def test_a_call_cut_with_closing_off_is_an_incomplete_item(client, stream: bool) -> None:
    """``afm_close_on_length: false``: the budget cuts the input where it falls; the response
    is ``incomplete`` and so is the call item (it was reported ``completed`` with input
    'SELECT tbl').  A budget the call fits is a completed item."""
    tool, text, _ = CASES["sql"]
    for budget, status in ((22, "incomplete"), (60, "completed")):
        answer = client.responses.create(model="scripted", input="Write it", tools=[tool],
                                         tool_choice="required", max_output_tokens=budget, stream=stream,
                                         extra_body={"afm_close_on_length": False})
        response = list(answer)[-1].response if stream else answer
        (call,) = response.output
        assert (response.status, call.type, call.status) == (status, "custom_tool_call", status), (
            budget, response.status, call)
        assert status == "incomplete" or call.input == text, call.input
