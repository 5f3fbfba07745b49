"""The one tool-call assembler (server router, server non-streaming body and client share it)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from afm_struct.tools.call_deltas import FragmentError, ToolCallAssembler


def _fragments(index: int, name: str, args: str, cuts: list[int]) -> list[dict]:
    """A call as the server streams it: head with id/type/name, then argument pieces."""
    points = sorted({c % (len(args) + 1) for c in cuts})
    pieces = [args[a:b] for a, b in zip([0, *points], [*points, len(args)], strict=True)]
    head = {"index": index, "id": f"call_{index}", "type": "function",
            "function": {"name": name, "arguments": pieces[0]}}
    return [head] + [{"index": index, "function": {"arguments": p}} for p in pieces[1:]]


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(calls=st.lists(st.tuples(st.sampled_from(["get_weather", "get_time", "f"]), st.text(max_size=30),
                                st.lists(st.integers(0, 40), max_size=6)), min_size=1, max_size=4),
       interleave=st.randoms(use_true_random=False))
def test_any_fragmentation_and_interleaving_assembles_each_call(calls, interleave) -> None:
    streams = [_fragments(i, name, args, cuts) for i, (name, args, cuts) in enumerate(calls)]
    # Interleave the calls' fragments while keeping each call's own order.
    order = [i for i, s in enumerate(streams) for _ in s]
    interleave.shuffle(order)
    cursors = [0] * len(streams)
    asm = ToolCallAssembler()
    for i in order:
        asm.add_delta({"tool_calls": [streams[i][cursors[i]]]})
        cursors[i] += 1
    got = {c["id"]: (c["function"]["name"], c["function"]["arguments"]) for c in asm.to_list()}
    assert got == {f"call_{i}": (name, args) for i, (name, args, _) in enumerate(calls)}
    assert [c["id"] for c in asm.to_list()] == [f"call_{i}" for i in range(len(calls))]


def test_first_non_null_wins_and_missing_index_is_an_error() -> None:
    asm = ToolCallAssembler()
    asm.add({"index": 0, "id": "a", "type": "function", "function": {"name": "f", "arguments": "{"}})
    asm.add({"index": 0, "id": "b", "function": {"name": "g", "arguments": "}"}})
    assert asm.to_list() == [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    asm.add_delta({"content": "no calls here"})
    assert len(asm.calls) == 1
    for bad in ({"function": {"arguments": "x"}}, {"index": "0"}, {"index": True}):
        with pytest.raises(FragmentError):
            asm.add(bad)
