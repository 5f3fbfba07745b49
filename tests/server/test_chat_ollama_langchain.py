"""LangChain's ``ChatOllama`` (langchain-ollama, unmodified) against the server's Ollama API on
the scripted model: plain and streamed answers, ``with_structured_output`` (``format`` = a
pydantic schema, enforced), and ``bind_tools`` calls."""

from __future__ import annotations

import functools
import operator
from typing import Any

import pytest
from pydantic import BaseModel

langchain_ollama = pytest.importorskip("langchain_ollama")  # the compat extra

CALL = '<tool_call>\n{"name": "Weather", "arguments": {"city": "Paris"}}\n</tool_call>'


class City(BaseModel):
    """A city and its population."""

    name: str
    population: int


class Weather(BaseModel):
    """Get the current weather for a city."""

    city: str


def _chat(live: Any, **kwargs: Any) -> Any:
    model = live.state.settings.model_names(live.loaded.info.id)[0]
    return langchain_ollama.ChatOllama(model=model, base_url=live.url, temperature=0, num_predict=60,
                                       **kwargs)


def test_invoke_and_stream(serve) -> None:
    live = serve("alpha beta gamma")
    chat = _chat(live)
    assert chat.invoke("hi").content == "alpha beta gamma"
    chunks = list(chat.stream("hi"))
    assert len(chunks) > 2
    whole = functools.reduce(operator.add, chunks)
    assert whole.content == "alpha beta gamma"
    assert whole.response_metadata.get("done_reason") == "stop"


def test_structured_output_with_a_pydantic_schema(serve) -> None:
    live = serve('Sure: {"name": "Paris", "population": 2100000}')
    city = _chat(live).with_structured_output(City, method="json_schema").invoke("Paris?")
    assert isinstance(city, City)


def test_bind_tools(serve) -> None:
    live = serve(CALL)
    message = _chat(live).bind_tools([Weather]).invoke("weather in Paris?")
    assert message.tool_calls and message.tool_calls[0]["name"] == "Weather"
    assert message.tool_calls[0]["args"] == {"city": "Paris"}
    chunks = list(_chat(live).bind_tools([Weather]).stream("weather in Paris?"))
    streamed = functools.reduce(operator.add, chunks)
    assert [c["args"] for c in streamed.tool_calls] == [{"city": "Paris"}]
