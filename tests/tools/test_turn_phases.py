"""The turn's phases over every tool syntax: think → content → call → content … → done.

A turn (:class:`afm_struct.turn.turn.Turn`, with a format's call layer) reads a thinking
block and then calls written in one of the syntaxes, cut at random places.  Its phase is a
function of the text read so far, whatever the cuts (the generator reads the phase at each step,
so it must not depend on how the text arrived), and it agrees with the events it yields: reasoning
while thinking, ``call`` from a call's :class:`CallOpened` to its :class:`CallClosed`, ``done``
at the end of the text (Harmony: at its ``<|call|>``).
"""

from __future__ import annotations

import re
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from afm_struct.tools import ToolCallRouter
from afm_struct.tools.syntaxes import render_calls
from afm_struct.turn.events import CallArguments, CallClosed, CallOpened, Reasoning, Text
from afm_struct.turn.turn import CALL, CONTENT, DONE, THINK

from ..decoding.randomized import examples
from .syntax_cases import FORMATS, chunked, tool_calls
from .test_syntaxes import one_call_per_turn, representable

PROPERTY = settings(max_examples=examples(60), deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))
THOUGHT = st.text(alphabet="abc xyz.,\n", min_size=1, max_size=16).filter(str.strip)
SHORT = {"c": CONTENT, "t": THINK, "k": CALL, "d": DONE}
CODE = {v: k for k, v in SHORT.items()}


def turn_text(fmt: Any, thought: str, calls: str, *, opened: bool) -> str:
    """The model's text: a thinking block in the format's reasoning syntax, then the calls."""
    if fmt.reasoning is not None:  # Harmony: the analysis channel, then the next message
        return f"{fmt.reasoning[0]}{thought}{fmt.reasoning[1]}<|start|>assistant{calls}"
    return ("" if opened else "<think>") + f"{thought}</think>\n\n{calls}"


def new_turn(fmt: Any, tools: Any, opened: bool) -> ToolCallRouter:
    tags = None if fmt.reasoning is not None else ("<think>", "</think>")
    return ToolCallRouter(fmt, tools=tools, reasoning_tags=tags, start_in_reasoning=opened,
                          id_factory=lambda: "call_0")


def check_step(events: list[Any], before: str, after: str) -> None:
    """The events one character made agree with the phases around it."""
    for ev in events:
        if isinstance(ev, Reasoning):
            assert before == THINK, (ev, before)
        elif isinstance(ev, Text):
            assert before in (CONTENT, CALL), (ev, before)
        elif isinstance(ev, CallArguments):
            assert CALL in (before, after), (ev, before, after)
    kinds = [type(ev) for ev in events if isinstance(ev, CallOpened | CallClosed)]
    if kinds and kinds[-1] is CallOpened:
        assert after == CALL, (events, after)
    if kinds and kinds[-1] is CallClosed:
        assert after in (CONTENT, DONE), (events, after)
    if CallClosed in kinds and kinds[0] is CallClosed:
        assert before == CALL, (events, before)


@PROPERTY
@given(data=st.data())
def test_the_phase_follows_the_text_in_every_syntax(data) -> None:
    fmt = data.draw(st.sampled_from(FORMATS))
    tools, calls = data.draw(tool_calls(max_calls=2))
    calls = one_call_per_turn(fmt, calls)
    assume(representable(fmt, calls))
    opened = fmt.reasoning is None and data.draw(st.booleans())
    text = turn_text(fmt, data.draw(THOUGHT), render_calls(fmt, calls), opened=opened)

    # The reference: one character at a time, the phase after each.
    ref = new_turn(fmt, tools, opened)
    phases = [ref.phase]
    opens = 0
    for ch in text:
        events = ref.feed(ch)
        check_step(events, phases[-1], ref.phase)
        opens += sum(isinstance(ev, CallOpened) for ev in events)
        phases.append(ref.phase)
    last = ref.finish()
    check_step(last, phases[-1], ref.phase)
    opens += sum(isinstance(ev, CallOpened) for ev in last)
    assert ref.phase == DONE
    assert opens == len(calls), (fmt.name, text)

    # think → content → (call → content)… → done, each call one ``call`` stretch.
    path = "".join(CODE[p] for i, p in enumerate([*phases, DONE]) if i == 0 or p != phases[i - 1])
    path = re.sub(r"(.)\1+", r"\1", path)
    assert re.fullmatch(r"c?tc(kc)*k?d", path), (fmt.name, text, path)
    assert path.count("k") == len(calls), (fmt.name, text, path)

    # However the text is cut, the phase after each piece is the reference's at that point.
    cut = new_turn(fmt, tools, opened)
    at = 0
    for chunk in chunked(data.draw, text):
        cut.feed(chunk)
        at += len(chunk)
        assert cut.phase == phases[at], (fmt.name, text, at, cut.phase, phases[at])
    cut.finish()
    assert cut.phase == DONE
    assert [c.name for c in cut.calls] == [c.name for c in ref.calls] == [n for n, _, _ in calls]
