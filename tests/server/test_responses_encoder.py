"""The Responses encoder without a server: a custom call's input decoded from any split of its
arguments, the item/event state machine over event sequences, and the final response object.

``AFM_STRUCT_RANDOM_EXAMPLES=N`` runs N examples of the randomized cases.
"""

from __future__ import annotations

import json
import os
import typing
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import Response, ResponseStreamEvent

from afm_struct.errors import GenerationError
from afm_struct.turn.events import (
    CallArguments,
    CallClosed,
    CallOpened,
    Failed,
    Finish,
    Reasoning,
    ResponseIdentity,
    Text,
    UsageReport,
)
from afm_struct.turn.outputs import FinishReason, Usage
from server.responses.custom_input import InputReader
from server.responses.encoder import ResponsesBody, ResponsesStream

from .responses_client import check_sequence

EXAMPLES = int(os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES", "0")) or 60
RANDOM = settings(max_examples=EXAMPLES, deadline=None,
                  derandomize=not os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES"))
EVENT_MODELS = {model.model_fields["type"].annotation.__args__[0]: model
                for model in typing.get_args(typing.get_args(ResponseStreamEvent)[0])}
IDENT = ResponseIdentity("resp_1", 1_700_000_000, "m")
ECHO: dict[str, Any] = {"tools": [], "tool_choice": "auto", "parallel_tool_calls": True, "metadata": {}}


def splits(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


@RANDOM
@given(st.text(), st.lists(st.integers(0, 10_000), max_size=12), st.booleans(), st.booleans())
def test_custom_input_is_decoded_whatever_the_split(value: str, cuts: list[int], ascii_only: bool,
                                                   spaced: bool) -> None:
    arguments = json.dumps({"input": value}, ensure_ascii=ascii_only,
                           separators=(", ", ": ") if spaced else (",", ":"))
    reader = InputReader()
    shown = "".join(reader.feed(piece) for piece in splits(arguments, cuts))
    whole, rest = reader.close()
    assert whole == value and shown + rest == value and rest == ""


def test_custom_input_of_a_cut_call_is_what_was_decoded() -> None:
    reader = InputReader()
    assert reader.feed('{"input": "ab\\u00') == "ab"
    assert reader.close() == ("ab", "")


def stream(custom: frozenset[str] = frozenset()) -> ResponsesStream:
    counter = iter(range(1000))
    return ResponsesStream(IDENT, ECHO, custom_tools=custom, new_id=lambda p: f"{p}{next(counter)}",
                           clock=lambda: 1_700_000_001)


def run(encoder: ResponsesStream, events: list[Any]) -> list[dict[str, Any]]:
    out = list(encoder._start())
    for event in events:
        out.extend(encoder.events(event))
    out.append(encoder.terminal())
    return out


ANSWER = st.one_of(
    st.builds(Text, st.text(min_size=1, max_size=5)),
    st.builds(Reasoning, st.text(min_size=1, max_size=5)),
    st.tuples(st.sampled_from(["f", "c"]), st.lists(st.text(max_size=4), max_size=3)),
)


@RANDOM
@given(st.lists(ANSWER, max_size=8), st.sampled_from([FinishReason.STOP, FinishReason.LENGTH,
                                                       FinishReason.CANCELLED, None]))
def test_any_event_sequence_encodes_to_a_valid_stream(parts: list[Any], reason: FinishReason | None) -> None:
    events: list[Any] = []
    calls = 0
    for part in parts:
        if isinstance(part, tuple):
            name, pieces = part
            events.append(CallOpened(calls, f"call_{calls}", name, arguments='{"input": "'))
            events += [CallArguments(calls, p.replace('"', "").replace("\\", "")) for p in pieces]
            events += [CallArguments(calls, '"}'), CallClosed(calls)]
            calls += 1
        else:
            events.append(part)
    end = Finish(reason) if reason is not None else Failed(GenerationError("boom"))
    encoder = stream(frozenset({"c"}))
    out = run(encoder, [*events, end, UsageReport(Usage(prompt_tokens=3, completion_tokens=5))])
    check_sequence(out)
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    for event in out:
        EVENT_MODELS[event["type"]].model_validate(event)
    final = Response.model_validate(out[-1]["response"])
    texts = "".join(e.text for e in events if isinstance(e, Text))
    assert final.output_text == texts
    expected = {None: "failed", FinishReason.CANCELLED: "cancelled", FinishReason.LENGTH: "incomplete"}
    assert final.status == expected.get(reason, "completed")
    body = ResponsesBody(stream(frozenset({"c"})))
    if reason is None:
        return
    for event in [*events, end, UsageReport(Usage(prompt_tokens=3, completion_tokens=5))]:
        body.add(event)
    assert body.body() == out[-1]["response"]


def test_reasoning_tokens_are_counted_and_usage_is_openais() -> None:
    out = run(stream(), [Reasoning("abc"), Text("x"), Finish(FinishReason.STOP),
                         UsageReport(Usage(prompt_tokens=4, completion_tokens=6, cached_tokens=2,
                                                           reasoning_tokens=3))])
    usage = out[-1]["response"]["usage"]
    assert usage == {"input_tokens": 4, "input_tokens_details": {"cached_tokens": 2, "cache_write_tokens": 0},
                     "output_tokens": 6, "output_tokens_details": {"reasoning_tokens": 3},
                     "total_tokens": 10}
