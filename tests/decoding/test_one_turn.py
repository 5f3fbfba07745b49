"""One turn per request: the generator's reasoning gate and the answer events read the same object.

A request with tools and a thinking block runs on the scripted model with the request's
:class:`~afm_struct.turn.turn.Turn`.  At every mask it fills, the gate records the phase it
reads; the deltas carry the turn's events.  The gate's turn is the request's (one instance), each
phase it saw is the phase of exactly the text emitted before that step (replayed on a fresh
turn), and the events on the deltas are those of that text: the two sides cannot disagree.
"""

from __future__ import annotations

from typing import Any

import pytest

from afm_struct.decoding.generator import Finished, GenerationRequest, Generator, TextDelta
from afm_struct.decoding.reasoning_gate import ReasoningGate, ReasoningTags
from afm_struct.decoding.sampling import SamplingParams
from afm_struct.grammar.spec import ToolDef
from afm_struct.testing import scripted_loaded_model
from afm_struct.tools import ToolCallRouter, load_table
from afm_struct.tools.grammar import compile_tool_grammar
from afm_struct.turn.reasoning import TurnText
from afm_struct.turn.turn import CALL, CONTENT, DONE, THINK

from ..tools.conftest import as_deltas

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
           "additionalProperties": False}
TOOLS = (ToolDef("get_weather", parameters=WEATHER, strict=True),)
CALLS = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
         '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>')
SCRIPT = f"<think>Two cities, two calls.</think>\n{CALLS}"


def new_turn(tags: ReasoningTags) -> ToolCallRouter:
    return ToolCallRouter(load_table().get("hermes"), reasoning_tags=tags,
                          start_in_reasoning=tags.opened_in_prompt, tools=TOOLS,
                          id_factory=lambda: "call_x")


@pytest.mark.parametrize("stop", [[], ["Lisbon", "</think>\n<tool_call>\n{\"name\": \"x"]])
def test_the_gate_and_the_events_read_one_turn(tokenizer, monkeypatch, stop: list[str]) -> None:
    tags = ReasoningTags()
    turn = new_turn(tags)
    sent: list[Any] = []  # what the generator sent, as it sends it
    # (the gate's turn, its phase, deltas sent before, text held for a possible stop string)
    seen: list[tuple[Any, str, int, str]] = []

    def recording(method):  # type: ignore[no-untyped-def]
        def wrapped(self, *args):  # type: ignore[no-untyped-def]
            if self.turn is turn or not isinstance(self.turn, TurnText):  # not a closer's fork
                seen.append((self.turn, self.turn.phase,
                            sum(isinstance(e, TextDelta) for e in sent), turn.held))
            return method(self, *args)
        return wrapped

    monkeypatch.setattr(ReasoningGate, "fill_mask", recording(ReasoningGate.fill_mask))
    monkeypatch.setattr(ReasoningGate, "batch_fill", recording(ReasoningGate.batch_fill))
    planned = compile_tool_grammar(tokenizer, load_table().get("hermes"), TOOLS, required=False,
                                   parallel=True)
    prompt = tokenizer.encode_chat([{"role": "user", "content": "Weather in Paris and Oslo?"}])
    gen = Generator.from_loaded(scripted_loaded_model(tokenizer, SCRIPT))
    # A stop string that begins with the close tag: the text holds the tag back for a few steps
    # (the stop never completes), while the gate must already read the answer's phase.
    request = GenerationRequest(prompt, SamplingParams(temperature=0, max_tokens=120, stop=stop),
                                constraint=planned.constraint, reasoning=tags, turn=turn,
                                stops_cut_grammar=False)
    gen.add(request, sent.append)
    while gen.has_work:
        gen.step()
    deltas = [e for e in sent if isinstance(e, TextDelta)]
    fin = sent[-1]
    assert isinstance(fin, Finished) and fin.text == SCRIPT and fin.reason == "stop", fin

    # One instance: the gate read the request's turn at every step (the budget closer's forks,
    # which try tokens ahead of the text, read their own copies of its reasoning layer).
    assert seen and all(t is turn for t, *_ in seen)
    # Each phase the gate saw is the phase of the text emitted before that step, and of the text
    # held back for the stop string, which goes out next (the stop never completes).
    held_once = False
    for _, phase, n, held in seen:
        emitted = "".join(d.text for d in deltas[:n])
        assert fin.text.startswith(emitted + held)
        replay = new_turn(tags)
        replay.feed(emitted + held)
        assert phase == replay.phase, (phase, replay.phase, emitted, held)
        held_once |= "</think>" in held
    assert held_once == bool(stop)
    phases = [p for i, (_, p, *_) in enumerate(seen) if i == 0 or p != seen[i - 1][1]]
    assert phases[:2] == [CONTENT, THINK] and CALL in phases, phases
    # The events that rode each delta are the turn's events for its text.
    fresh = new_turn(tags)
    for d in deltas:
        assert as_deltas(d.events or []) == as_deltas(fresh.feed(d.text)), d
    assert as_deltas(fin.events or []) == as_deltas(fresh.finish())
    assert turn.phase == DONE and [c.arguments for c in turn.calls] == ['{"city": "Paris"}',
                                                                        '{"city": "Oslo"}']
    assert turn.finish_reason(fin.reason) == "tool_calls"
    assert THINK not in [p for _, p, *_ in seen[seen.index(next(s for s in seen if s[1] == CALL)):]]
