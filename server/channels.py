"""The answer events of a request without tools: its :class:`~afm_struct.turn.turn.Turn`.

The turn cuts generated text into :class:`Text` and, when the model thinks, :class:`Reasoning`
(requests with tools use :class:`afm_struct.tools.call_stream.ToolCallRouter`, the same turn with
the format's call layer, made by ``ToolPlan.make_router``).  :class:`ContentRouter` and
:func:`make_router` are the names this module has given it: no rules of their own.
"""

from __future__ import annotations

from afm_struct.turn.reasoning import SYNTAXES, ReasoningTags
from afm_struct.turn.turn import Turn

Tags = ReasoningTags | tuple[str, str]


class ContentRouter(Turn):
    """Everything is :class:`Text`; with ``split_reasoning``, a thinking block (``<think>…</think>``
    or the model's own ``tags``) is :class:`Reasoning` by the rules of
    :class:`~afm_struct.turn.reasoning.TurnText`.  ``start_in_reasoning``: the prompt
    already opened the block."""

    def __init__(self, *, split_reasoning: bool = False, tags: Tags = SYNTAXES[0],
                 start_in_reasoning: bool = False) -> None:
        super().__init__(tags if split_reasoning else None, start_in_reasoning=start_in_reasoning)


def make_router(*, reasoning_tags: Tags | None = None, start_in_reasoning: bool = False) -> Turn:
    """The turn of a request without tools (requests with tools use ``ToolPlan.make_router``)."""
    return Turn(reasoning_tags, start_in_reasoning=start_in_reasoning)
