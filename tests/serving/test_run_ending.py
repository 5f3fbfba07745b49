"""RunEnding: the end events a whole-body encoder gathers (chat and text completions share it)."""

from __future__ import annotations

import pytest

from afm_struct.errors import InvalidRequestError
from afm_struct.turn.events import Failed, Finish, ProfileReport, RunEnding, Text, UsageReport
from afm_struct.turn.outputs import FinishReason, Usage


def test_end_events_are_taken_and_answer_events_are_not() -> None:
    end = RunEnding()
    assert end.take(Text("hi")) is False
    with pytest.raises(AssertionError):
        end.finished()  # no Finish yet
    usage = Usage(prompt_tokens=3, completion_tokens=2)
    assert end.take(Finish(FinishReason.LENGTH)) and end.take(UsageReport(usage))
    assert end.finished() is FinishReason.LENGTH and end.usage == usage
    assert end.add_profile({"a": 1}) == {"a": 1}  # none asked for
    assert end.take(ProfileReport("afm_profile", {"ttft_s": 0.1}))
    assert end.add_profile({"a": 1}) == {"a": 1, "afm_profile": {"ttft_s": 0.1}}


def test_a_failure_is_raised() -> None:
    error = InvalidRequestError("bad", param="x")
    with pytest.raises(InvalidRequestError):
        RunEnding().take(Failed(error))
