"""Text deltas → protocol deltas: the seam between the generator's text and the wire channels.

The generator yields plain text.  A :class:`DeltaRouter` turns it into OpenAI delta dicts.
:class:`ContentRouter` (requests without tools) gives ``{"content": …}`` and, when the model
thinks, ``{"reasoning_content": …}``; requests with tools use
:class:`afm_struct.tools.stream.ToolCallRouter` (made by ``ToolPlan.make_router``), which also
gives ``{"tool_calls": [...]}`` and finishes with ``tool_calls`` once a call was made.  Both split
thinking blocks off with the same :class:`afm_struct.text.reasoning.ReasoningSplitter`.
Routers are pure state machines: no I/O, no MLX.
"""

from __future__ import annotations

from typing import Any, Protocol

from afm_struct.decoding.outputs import FinishReason
from afm_struct.text.reasoning import REASONING, ReasoningSplitter

Delta = dict[str, Any]

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


class DeltaRouter(Protocol):
    """Turns generated text into protocol deltas."""

    def feed(self, text: str) -> list[Delta]:
        """Deltas made available by ``text`` (possibly none while a tag is ambiguous)."""

    def finish(self) -> list[Delta]:
        """Deltas held back until the end of generation."""

    def finish_reason(self, reason: FinishReason, *, whole: bool = False) -> FinishReason:
        """The wire finish_reason for the generator's ``reason`` (e.g. ``tool_calls``);
        ``whole``: a ``length`` end left the model's text whole (``Finished.whole``)."""


def _append(out: list[Delta], key: str, text: str) -> None:
    if not text:
        return
    if out and key in out[-1]:
        out[-1][key] += text
    else:
        out.append({key: text})


class ContentRouter:
    """Everything is ``content``; with ``split_reasoning``, a thinking block (``<think>…</think>``
    or the model's own ``tags``) goes to ``reasoning_content`` by the rule of
    :class:`~afm_struct.text.reasoning.ReasoningSplitter`.  ``start_in_reasoning``: the prompt
    already opened the block."""

    def __init__(self, *, split_reasoning: bool = False, tags: tuple[str, str] = (THINK_OPEN, THINK_CLOSE),
                 start_in_reasoning: bool = False) -> None:
        self.splitter = ReasoningSplitter(tags if split_reasoning else None,
                                          start_in_reasoning=start_in_reasoning)

    def feed(self, text: str) -> list[Delta]:
        """See :meth:`DeltaRouter.feed`."""
        return _deltas(self.splitter.feed(text))

    def finish(self) -> list[Delta]:
        """See :meth:`DeltaRouter.finish`: a held partial tag is ordinary text after all."""
        return _deltas(self.splitter.feed("", final=True))

    def finish_reason(self, reason: FinishReason, *, whole: bool = False) -> FinishReason:
        """See :meth:`DeltaRouter.finish_reason`: text never changes the reason (a whole JSON
        value cut by the budget is still cut: the model meant more)."""
        return reason


def _deltas(pieces: list[tuple[str, str]]) -> list[Delta]:
    out: list[Delta] = []
    for channel, text in pieces:
        _append(out, "reasoning_content" if channel == REASONING else "content", text)
    return out


def make_router(*, reasoning_tags: tuple[str, str] | None = None,
                start_in_reasoning: bool = False) -> DeltaRouter:
    """The router for a request without tools (requests with tools use ``ToolPlan.make_router``)."""
    if reasoning_tags is None:
        return ContentRouter()
    return ContentRouter(split_reasoning=True, tags=reasoning_tags, start_in_reasoning=start_in_reasoning)
