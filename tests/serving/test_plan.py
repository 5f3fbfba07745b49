"""The generation plan's own rules: the thinking switch, the schema's path, engine-named params."""

from __future__ import annotations

import pytest

from afm_struct.errors import InvalidRequestError
from afm_struct.grammar.spec import JsonObjectRequest, JsonSchemaRequest
from afm_struct.serving.plan import Conversation, OutputFormat, RequestPaths

MESSAGES = [{"role": "user", "content": "hi"}]


def test_no_thinking_setting_leaves_the_callers_template_variables_as_sent() -> None:
    assert Conversation(MESSAGES).template_variables() is None
    kwargs = {"enable_thinking": True, "x": 1}
    assert Conversation(MESSAGES, kwargs).template_variables() is kwargs


def test_a_thinking_setting_sets_the_switch_unless_the_caller_set_it() -> None:
    assert Conversation(MESSAGES, thinking=False).template_variables() == {"enable_thinking": False}
    both = Conversation(MESSAGES, {"enable_thinking": True}, thinking=False)
    assert both.template_variables() == {"enable_thinking": True}


def test_output_formats_compile_requests_that_name_their_path() -> None:
    assert OutputFormat().constraint_request() is None
    assert isinstance(OutputFormat("json_object").constraint_request(), JsonObjectRequest)
    req = OutputFormat("json_schema", schema={"type": "object"}, strict=True, name="n",
                       param="text.format.schema").constraint_request()
    assert isinstance(req, JsonSchemaRequest)
    assert (req.schema, req.strict, req.name, req.param) == ({"type": "object"}, True, "n",
                                                             "text.format.schema")
    assert OutputFormat("json_schema").constraint_request().schema is True  # no schema: any JSON


def test_engine_named_params_become_the_protocols_paths() -> None:
    paths = RequestPaths(conversation="input")
    with pytest.raises(InvalidRequestError) as exc, paths.naming():
        raise InvalidRequestError("too long", param="messages")
    assert exc.value.param == "input"
    with pytest.raises(InvalidRequestError) as exc, paths.naming():
        raise InvalidRequestError("bad", param="max_tokens")
    assert exc.value.param == "max_tokens"
