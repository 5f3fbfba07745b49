"""instructor over the openai client: JSON_SCHEMA, TOOLS, TOOLS_STRICT and ``create_partial``."""

from __future__ import annotations

import warnings

import instructor
import openai
import pytest

from .conftest import CITY_PROMPT, MAX_TOKENS, WEATHER_PROMPT, City, CompatServer, Weather, Wire, tool_schema

pytestmark = pytest.mark.model


def _client(server: CompatServer, mode: instructor.Mode) -> instructor.Instructor:
    raw = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120)
    with warnings.catch_warnings():  # TOOLS_STRICT is a deprecated alias in instructor 1.17
        warnings.simplefilter("ignore", DeprecationWarning)
        return instructor.from_openai(raw, mode=mode)


def _create(server: CompatServer, mode: instructor.Mode, model: type, prompt: str):
    return _client(server, mode).chat.completions.create(
        model=server.model, response_model=model, messages=[{"role": "user", "content": prompt}],
        max_tokens=MAX_TOKENS, temperature=0, max_retries=1)


def test_json_schema_mode(compat_server: CompatServer, wire: Wire) -> None:
    city = _create(compat_server, instructor.Mode.JSON_SCHEMA, City, CITY_PROMPT)
    assert isinstance(city, City) and city.name
    assert len(wire.requests) == 1  # valid the first time: no re-ask
    assert wire.last["response_format"]["type"] == "json_schema"


def test_tools_mode(compat_server: CompatServer, wire: Wire) -> None:
    weather = _create(compat_server, instructor.Mode.TOOLS, Weather, WEATHER_PROMPT)
    assert isinstance(weather, Weather) and weather.unit in ("c", "f")
    assert len(wire.requests) == 1
    assert wire.last["tool_choice"] == {"type": "function", "function": {"name": "Weather"}}


def test_tools_strict_mode(compat_server: CompatServer, wire: Wire) -> None:
    weather = _create(compat_server, instructor.Mode.TOOLS_STRICT, Weather, WEATHER_PROMPT)
    assert isinstance(weather, Weather) and weather.unit in ("c", "f")
    assert len(wire.requests) == 1
    # instructor 1.17 maps the deprecated TOOLS_STRICT to TOOLS: the tool goes out without
    # ``strict`` (strict=True only turns on pydantic's strict validation of the answer).
    assert wire.last["tool_choice"]["function"]["name"] == "Weather"
    assert "strict" not in tool_schema(wire.last, "Weather")


def test_create_partial(compat_server: CompatServer, wire: Wire) -> None:
    partials = list(_client(compat_server, instructor.Mode.JSON_SCHEMA).chat.completions.create_partial(
        model=compat_server.model, response_model=City, messages=[{"role": "user", "content": CITY_PROMPT}],
        max_tokens=MAX_TOKENS, temperature=0, max_retries=1))
    assert len(partials) >= 2  # streamed: several partial objects, growing
    assert any(p.name is None or p.country is None for p in partials[:-1])
    final = City.model_validate(partials[-1].model_dump())
    assert final.name and final.country
    assert wire.last["stream"] is True


def test_create_partial_in_tools_mode(compat_server: CompatServer, wire: Wire) -> None:
    """The issue's case: TOOLS mode streams partial objects from a named, non-strict tool call
    (before schema-guided arguments: ``{"place": "City", "name": ["Ada", ...`` cut unparseable)."""
    partials = list(_client(compat_server, instructor.Mode.TOOLS).chat.completions.create_partial(
        model=compat_server.model, response_model=Weather,
        messages=[{"role": "user", "content": WEATHER_PROMPT}],
        max_tokens=MAX_TOKENS, temperature=0, max_retries=1))
    assert len(partials) >= 2 and wire.last["stream"] is True
    assert "strict" not in tool_schema(wire.last, "PartialWeather")  # instructor's partial model
    final = Weather.model_validate(partials[-1].model_dump())
    assert final.city and final.unit in ("c", "f")
