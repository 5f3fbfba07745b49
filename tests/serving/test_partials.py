"""Partial values (afm_struct/serving/partials.py): jiter's partial mode over every prefix of
JSON texts (hypothesis), per-channel tracking of a run's events, and a random-weight model over
generated schemas through ``extract_stream`` (every delta's partial parses, the last is the
final object).

The random-model driver runs 4 examples by default; ``AFM_STRUCT_RANDOM_EXAMPLES=N`` runs N."""

from __future__ import annotations

import json
import os
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from afm_struct.grammar.compiler import compile_constraint
from afm_struct.grammar.spec import JsonSchemaRequest, Mode
from afm_struct.library.extraction_stream import extract_stream
from afm_struct.library.partial_models import typed_partial
from afm_struct.serving.partials import PartialJson, PartialValues, parse_partial
from afm_struct.testing import random_loaded_model, scripted_loaded_model
from afm_struct.turn.events import CallArguments, CallOpened, Partial, Reasoning, Text

RANDOM = os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES")
MODEL_EXAMPLES = int(RANDOM or 0) or 4
VALUE_EXAMPLES = int(RANDOM or 0) or 25

VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.text(max_size=6),
              st.floats(allow_nan=False, allow_infinity=False)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=4), inner, max_size=4)),
    max_leaves=12)


@settings(max_examples=VALUE_EXAMPLES, deadline=None, derandomize=not RANDOM)
@given(VALUES, st.booleans())
def test_every_prefix_parses_to_json_and_the_whole_to_the_value(value: Any, ascii_: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_)
    growing = PartialJson()
    last = None
    for i in range(len(text)):
        last = growing.feed(text[i])
        if last is not None:  # a JSON value: it survives a round trip through JSON text
            assert json.loads(json.dumps(last.value)) == last.value
    assert last is not None and last.value == json.loads(text)


def test_partial_values_of_prefixes() -> None:
    assert parse_partial("") is None and parse_partial("  ") is None and parse_partial("tr") is None
    assert parse_partial('{"a": "b') == Partial({"a": "b"})
    assert parse_partial('{"a": 1.') == Partial({})  # an unfinished number is left out
    assert parse_partial('[1, {"k": [tr') == Partial([1, {"k": []}])
    assert parse_partial("null") == Partial(None)  # JSON null, not "no value"
    growing = PartialJson()
    assert growing.feed('{"a": 1}') == Partial({"a": 1})
    assert growing.feed(" trailing") == Partial({"a": 1})  # no longer parses: the last one stays


def test_run_events_get_the_value_of_their_channel_so_far() -> None:
    values = PartialValues(json_content=True)
    events = [Reasoning("{not json"), Text('{"a": [1'), CallOpened(0, "c0", "f", '{"x": "y'),
              CallOpened(1, "c1", "g", ""), Text(", 2]}"), CallArguments(0, 'z"}'), CallArguments(1, "[3]")]
    for event in events:
        values.attach(event)
    assert [getattr(e, "partial", None) for e in events] == [
        None, Partial({"a": [1]}), Partial({"x": "y"}), None, Partial({"a": [1, 2]}),
        Partial({"x": "yz"}), Partial([3])]
    plain = PartialValues(json_content=False)  # a text answer: its content is not parsed
    text = Text('{"a": 1}')
    plain.attach(text)
    assert text.partial is None


class Item(BaseModel):
    name: str
    size: int = 0


def test_typed_partial_constructs_without_validating() -> None:
    item = typed_partial({"name": "ha"}, Item)
    assert isinstance(item, Item) and item.name == "ha" and item.size == 0
    assert not hasattr(typed_partial({}, Item), "name")
    assert typed_partial([1], Item) == [1] and typed_partial({"a": 1}) == {"a": 1}


def test_extract_stream_partials_typed_and_the_result(tokenizer) -> None:
    script = '{"name": "lamp", "size": 3}'
    stream = extract_stream("a lamp", Item, model=scripted_loaded_model(tokenizer, script))
    values = list(stream.partials())
    result = stream.result()
    assert all(isinstance(v, Item) for v in values)
    assert values[-1] == result.value == Item(name="lamp", size=3)
    report = result.enforcement
    assert report is not None and report["rung"] == "exact"
    assert {e["status"] for e in report["keywords"]} == {"enforced"}


LEAVES = st.one_of(
    st.just({"type": "boolean"}), st.just({"type": "null"}),
    st.builds(lambda n: {"type": "string", "maxLength": n}, st.integers(0, 6)),
    st.builds(lambda lo: {"type": "integer", "minimum": lo}, st.integers(-5, 5)),
    st.just({"type": "number"}),
    st.builds(lambda vs: {"enum": vs}, st.lists(st.sampled_from(["a", "b c", 1, None, True]), min_size=1,
                                                max_size=3, unique=True)))


def _object(children: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.sampled_from(["a", "b", "k1", "é"]), children, min_size=1, max_size=3).map(
        lambda props: {"type": "object", "properties": props, "required": sorted(props),
                       "additionalProperties": False})


SCHEMAS = st.recursive(LEAVES, lambda inner: st.one_of(
    _object(inner), st.builds(lambda s: {"type": "array", "items": s, "maxItems": 3}, inner)),
    max_leaves=5).filter(lambda s: s.get("type") in ("object", "array"))


@settings(max_examples=MODEL_EXAMPLES, deadline=None, derandomize=not RANDOM,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(SCHEMAS, st.integers(0, 2**16))
def test_random_model_every_partial_parses_and_the_last_is_the_object(tokenizer, schema, seed) -> None:
    assert compile_constraint(tokenizer, JsonSchemaRequest(schema)).mode is Mode.ENFORCED
    stream = extract_stream("JSON please", schema, model=random_loaded_model(tokenizer, seed),
                            temperature=1.0, seed=seed, max_tokens=160, check=False)
    values = list(stream.partials())
    result = stream.result()
    for value in values:
        assert json.loads(json.dumps(value)) == value
    if os.environ.get("AFM_STRUCT_PARTIALS_LOG"):  # how many runs finished (see the docstring)
        print("finished:", result.finish_reason, len(values))
    if result.finish_reason == "stop":
        assert result.valid, result.errors
        assert values and values[-1] == json.loads(result.raw_text)
