"""The turn's phase at a stop string: text held for it is read ahead, a completed stop ends it."""

from __future__ import annotations

from afm_struct.turn.events import Reasoning
from afm_struct.turn.turn import CONTENT, DONE, THINK, Turn


def test_text_held_for_a_stop_is_read_ahead_and_a_stop_ends_the_turn() -> None:
    turn = Turn(("<think>", "</think>"), start_in_reasoning=True)
    assert [type(e) for e in turn.feed("plan")] == [Reasoning] and turn.phase == THINK
    # The generator holds "</think>\n" back (a stop string "</think>\nNo" may still complete):
    # not emitted, no events yet, but the model has left the block: the mask must know.
    turn.hold("</think>\n")
    assert turn.phase == CONTENT and turn.text.phase == THINK and turn.held == "</think>\n"
    turn.hold("")  # the stop did not complete: the text goes out
    assert turn.feed("</think>\nYes") and turn.phase == CONTENT
    turn.hold("N")
    turn.stop()  # "No" completed a stop string: nothing after it is emitted, the turn is over
    assert turn.phase == DONE and turn.held == ""
    assert turn.finish() == []
