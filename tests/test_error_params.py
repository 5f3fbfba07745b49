"""The suite-wide check of error params (tests/error_params.py) tells right paths from wrong."""

from __future__ import annotations

import json

import pytest

from .error_params import Record, resolves, wrong_param

BODY = {"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "", "schema": {}}},
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "chat_template_kwargs": {"a.b": {"c": 1}}}


def record(param, *, code="invalid_value", status=400, path="/v1/chat/completions", headers=None):
    return Record("POST", path, headers or {}, json.dumps(BODY).encode(), status,
                  {"message": "m", "type": "invalid_request_error", "param": param, "code": code})


@pytest.mark.parametrize("param", [None, "messages", "messages.0.content.0.text",
                                   "response_format.json_schema.name", "tools.0.function.parameters",
                                   "chat_template_kwargs.a.b.c"])
def test_paths_of_the_request_pass(param):
    assert wrong_param(record(param)) is None


@pytest.mark.parametrize("param", ["response_format.json_schema.json_schema.name",
                                   "response_format.json_schema.schema.properties", "schema",
                                   "messages.1", "tools.0.function.parameters.type.x", "seed"])
def test_paths_not_in_the_request_fail(param):
    assert wrong_param(record(param)) is not None


def test_a_missing_field_needs_its_parent():
    missing = "missing_required_parameter"
    assert wrong_param(record("response_format.json_schema.strict", code=missing)) is None
    assert wrong_param(record("response_format.x.strict", code=missing)) is not None
    assert not resolves(BODY, ["seed"]) and resolves(BODY, ["seed"], missing_ok=True)


def test_names_outside_the_body_only_where_they_apply():
    assert wrong_param(record("X-Request-ID", headers={"x-request-id": "bad id"})) is None
    assert wrong_param(record("X-Request-ID")) is not None
    assert wrong_param(record("body", status=413)) is None and wrong_param(record("body")) is not None
    assert wrong_param(record("request_id", path="/v1/chat/completions/r1/cancel", status=404)) is None
    get = Record("GET", "/v1/models/x", {}, b"", 404, {"param": "model", "code": "model_not_found"})
    assert wrong_param(get) is None and wrong_param(record("model")) is not None
