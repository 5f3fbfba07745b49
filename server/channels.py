"""Generated text → answer events: the router of requests without tools.

The generator yields plain text.  An :class:`~afm_struct.serving.events.AnswerRouter` turns it
into typed events: :class:`ContentRouter` gives :class:`Text` and, when the model thinks,
:class:`Reasoning`; requests with tools use :class:`afm_struct.tools.stream.ToolCallRouter`
(made by ``ToolPlan.make_router``), which also gives the tool-call events and finishes with
``tool_calls`` once a call was made.  Both split thinking blocks off with the same
:class:`afm_struct.text.reasoning.TurnText`.  Routers are pure state machines: no I/O,
no MLX, no protocol shapes (the encoders write those).
"""

from __future__ import annotations

from afm_struct.decoding.outputs import FinishReason
from afm_struct.serving.events import AnswerEvent, AnswerRouter, Reasoning, Text, add_text
from afm_struct.text.reasoning import REASONING, SYNTAXES, ReasoningTags, TurnText

Tags = ReasoningTags | tuple[str, str]


class ContentRouter:
    """Everything is :class:`Text`; with ``split_reasoning``, a thinking block (``<think>…</think>``
    or the model's own ``tags``) is :class:`Reasoning` by the rules of
    :class:`~afm_struct.text.reasoning.TurnText`.  ``start_in_reasoning``: the prompt
    already opened the block."""

    def __init__(self, *, split_reasoning: bool = False, tags: Tags = SYNTAXES[0],
                 start_in_reasoning: bool = False) -> None:
        self.splitter = TurnText(tags if split_reasoning else None, start_in_reasoning=start_in_reasoning)

    def feed(self, text: str) -> list[AnswerEvent]:
        """See :meth:`AnswerRouter.feed`."""
        return _events(self.splitter.feed(text))

    def finish(self) -> list[AnswerEvent]:
        """See :meth:`AnswerRouter.finish`: a held partial tag is ordinary text after all."""
        return _events(self.splitter.feed("", final=True))

    def finish_reason(self, reason: FinishReason, *, whole: bool = False) -> FinishReason:
        """See :meth:`AnswerRouter.finish_reason`: text never changes the reason (a whole JSON
        value cut by the budget is still cut: the model meant more)."""
        return reason


def _events(pieces: list[tuple[str, str]]) -> list[AnswerEvent]:
    out: list[AnswerEvent] = []
    for channel, text in pieces:
        add_text(out, Reasoning if channel == REASONING else Text, text)
    return out


def make_router(*, reasoning_tags: Tags | None = None, start_in_reasoning: bool = False) -> AnswerRouter:
    """The router for a request without tools (requests with tools use ``ToolPlan.make_router``)."""
    if reasoning_tags is None:
        return ContentRouter()
    return ContentRouter(split_reasoning=True, tags=reasoning_tags, start_in_reasoning=start_in_reasoning)
