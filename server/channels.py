"""Text deltas → protocol deltas: the seam between the generator's text and the wire channels.

The generator yields plain text.  A :class:`DeltaRouter` turns it into OpenAI delta dicts:
``{"content": …}`` and ``{"reasoning_content": …}`` here (:class:`ContentRouter`, for requests
without tools), plus ``{"tool_calls": [...]}`` for requests with tools
(:class:`afm_struct.tools.stream.ToolCallRouter`, made by ``ToolPlan.make_router``: the same three
methods, and its ``finish_reason`` turns ``stop`` into ``tool_calls`` once a call was made).
Routers are pure state machines: no I/O, no MLX.
"""

from __future__ import annotations

from typing import Any, Protocol

from afm_struct.decoding.outputs import FinishReason

Delta = dict[str, Any]

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


class DeltaRouter(Protocol):
    """Turns generated text into protocol deltas."""

    def feed(self, text: str) -> list[Delta]:
        """Deltas made available by ``text`` (possibly none while a tag is ambiguous)."""

    def finish(self) -> list[Delta]:
        """Deltas held back until the end of generation."""

    def finish_reason(self, reason: FinishReason) -> FinishReason:
        """The wire finish_reason for the generator's ``reason`` (e.g. ``tool_calls``)."""


def _partial_suffix(buf: str, tag: str) -> int:
    """Length of the longest suffix of ``buf`` that is a proper prefix of ``tag``."""
    for n in range(min(len(tag) - 1, len(buf)), 0, -1):
        if buf.endswith(tag[:n]):
            return n
    return 0


def _append(out: list[Delta], key: str, text: str) -> None:
    if not text:
        return
    if out and key in out[-1]:
        out[-1][key] += text
    else:
        out.append({key: text})


class ContentRouter:
    """Everything is ``content``; with ``split_reasoning``, a thinking block (``<think>…</think>``
    or the model's own ``tags``) goes to ``reasoning_content`` (tags removed, whitespace right
    after the block dropped).  ``start_in_reasoning``: the prompt already opened the block."""

    def __init__(self, *, split_reasoning: bool = False, tags: tuple[str, str] = (THINK_OPEN, THINK_CLOSE),
                 start_in_reasoning: bool = False) -> None:
        self.split_reasoning = split_reasoning
        self.open_tag, self.close_tag = tags
        self._held = ""
        self._in_reasoning = split_reasoning and start_in_reasoning
        self._after_reasoning = False

    def feed(self, text: str) -> list[Delta]:
        """See :meth:`DeltaRouter.feed`."""
        out: list[Delta] = []
        if not self.split_reasoning:
            _append(out, "content", text)
            return out
        buf = self._held + text
        self._held = ""
        while buf:
            tag = self.close_tag if self._in_reasoning else self.open_tag
            key = "reasoning_content" if self._in_reasoning else "content"
            at = buf.find(tag)
            if at >= 0:
                self._emit(out, key, buf[:at])
                buf = buf[at + len(tag):]
                self._after_reasoning = self._in_reasoning
                self._in_reasoning = not self._in_reasoning
                continue
            keep = _partial_suffix(buf, tag)
            self._emit(out, key, buf[: len(buf) - keep])
            self._held = buf[len(buf) - keep:]
            break
        return out

    def _emit(self, out: list[Delta], key: str, text: str) -> None:
        if key == "content" and self._after_reasoning:
            text = text.lstrip()
            if not text:
                return
            self._after_reasoning = False
        _append(out, key, text)

    def finish(self) -> list[Delta]:
        """See :meth:`DeltaRouter.finish`: a held partial tag is ordinary text after all."""
        out: list[Delta] = []
        if self._held:
            self._emit(out, "reasoning_content" if self._in_reasoning else "content", self._held)
            self._held = ""
        return out

    def finish_reason(self, reason: FinishReason) -> FinishReason:
        """See :meth:`DeltaRouter.finish_reason`: text never changes the reason."""
        return reason


def make_router(*, reasoning_tags: tuple[str, str] | None = None,
                start_in_reasoning: bool = False) -> DeltaRouter:
    """The router for a request without tools (requests with tools use ``ToolPlan.make_router``)."""
    if reasoning_tags is None:
        return ContentRouter()
    return ContentRouter(split_reasoning=True, tags=reasoning_tags, start_in_reasoning=start_in_reasoning)
