"""The openai SDK's ``responses.create`` on the embedded model over two turns: the second names
the first by ``previous_response_id`` and its prompt holds the first turn.  (The SDK's
create / parse / stream helpers are in tests/server/test_responses_sdk.py.)"""

from __future__ import annotations

import openai
import pytest

from .conftest import CompatServer, Wire

pytestmark = pytest.mark.model


def test_previous_response_id_over_two_turns(compat_server: CompatServer, wire: Wire) -> None:
    client = openai.OpenAI(base_url=compat_server.base_url, api_key="unused", max_retries=0, timeout=120)
    first = client.responses.create(model=compat_server.model, input="My name is Ada. Say hello.",
                                    max_output_tokens=8, temperature=0)
    second = client.responses.create(model=compat_server.model, input="What is my name?",
                                     previous_response_id=first.id, max_output_tokens=8, temperature=0)
    assert second.previous_response_id == first.id and second.id != first.id
    assert first.output_text and second.output_text
    assert first.usage is not None and second.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    assert [e.path for e in wire.exchanges] == ["/v1/responses", "/v1/responses"]
    assert wire.requests[1]["previous_response_id"] == first.id
    assert client.responses.retrieve(second.id).previous_response_id == first.id
