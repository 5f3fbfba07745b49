"""One request's turn: where the model is (think / content / call / done) and its answer events.

A :class:`Turn` is made once per request and read by both sides of the generation, so the two
cannot disagree about where the model is:

* the generator feeds it the text each step emits (after the stop strings and the hidden
  tokens: exactly the text the client is shown) and its reasoning gate reads :attr:`Turn.phase`
  (``afm_struct/decoding/reasoning_gate.py``: the mask inside a thinking block, the budget's forced
  close, the end of the turn);
* the answer events it yields for that text (:class:`Text`, :class:`Reasoning`,
  :class:`CallOpened`, :class:`CallArguments`, :class:`CallClosed`) travel with the step's text
  delta to the server, which writes them in its protocol's shape (``server/run.py``).

Underneath, one rule set per layer, each a pure state machine over the
:class:`~afm_struct.turn.markers.MarkerScanner`: the reasoning split
(:class:`~afm_struct.turn.reasoning.TurnText`: ``think`` until the block closes, ``done`` at a
syntax's end text such as Harmony's ``<|call|>``) and, when the request has tools, the format's
call routing (:class:`afm_struct.tools.call_stream.CallRouting`: the call parser, the markup
stripper, call ids; ``call`` between a call's start and its end).  A stop string or the end of
generation also ends the turn (``done``).  No I/O, no MLX, no protocol shapes.
"""

from __future__ import annotations

from typing import Protocol

from .events import AnswerEvent, Reasoning, Text, add_text
from .outputs import FinishReason
from .reasoning import CONTENT, DONE, REASONING, THINK, ReasoningTags, TurnText

CALL = "call"
PHASES = (THINK, CONTENT, CALL, DONE)


class Calls(Protocol):
    """The call layer of a turn with tools (:class:`afm_struct.tools.call_stream.CallRouting`)."""

    @property
    def in_call(self) -> bool:
        """True between a call's start (its name is known) and its end."""

    @property
    def calls(self) -> list:  # type: ignore[type-arg]
        """The calls made so far, whole (:class:`afm_struct.tools.call_deltas.ToolCall`)."""

    @property
    def exhausted(self) -> bool:
        """True once the calls allowed (``max_tool_calls``) are all made: the turn is over."""

    def route(self, out: list[AnswerEvent], text: str) -> None:
        """Append the events of answer text ``text`` (thinking already removed)."""

    def reasoning(self, text: str, *, end: bool = False) -> str:
        """Thinking text without the layer's tags (kept tokens it reads in the answer);
        ``end``: the block ended, what it held goes out or is dropped."""

    def finish(self, out: list[AnswerEvent]) -> None:
        """Append the events held until the end (a call cut short, held markup)."""

    def finish_reason(self, reason: FinishReason, *, whole: bool = False) -> FinishReason:
        """The reason given the calls made (``tool_calls``)."""


class Turn:
    """One request's turn; see the module docstring.

    ``reasoning``: the thinking syntax to split off (None: all text is the answer);
    ``start_in_reasoning``: the prompt opened the block; ``calls``: the call layer (None: a
    request without tools, whose answer is all :class:`Text`).
    """

    def __init__(self, reasoning: ReasoningTags | tuple[str, str] | None = None, *,
                 start_in_reasoning: bool = False, calls: Calls | None = None) -> None:
        self.text = TurnText(reasoning, start_in_reasoning=start_in_reasoning)
        self.call_layer = calls
        self._ended = False  # a stop string or the end of generation ended the turn
        # Text the generator holds back because it may begin a stop string: not emitted (no
        # events yet), but the model wrote it, so the phase reads it ahead (see :attr:`phase`).
        self._held = ""

    @property
    def syntax(self) -> ReasoningTags | None:
        """The reasoning syntax followed (None: none)."""
        return self.text.syntax

    @property
    def phase(self) -> str:
        """``think`` / ``content`` / ``call`` / ``done``: where the text read so far left the
        model.  Text held for a possible stop string (:meth:`hold`) is read ahead on a copy of
        the reasoning layer: it goes out unless the stop completes, and then the turn is over
        anyway, so the generator's mask never lags the model by the held text."""
        text = self.text
        if self._held and not self._ended:
            text = text.fork()
            text.feed(self._held)
        if self._ended or text.phase == DONE:
            return DONE
        if text.phase == THINK:
            return THINK
        if self.call_layer is not None and self.call_layer.in_call:
            return CALL
        return CONTENT

    @property
    def calls(self) -> list:  # type: ignore[type-arg]
        """The tool calls made so far, whole (none without tools)."""
        return self.call_layer.calls if self.call_layer is not None else []

    @property
    def calls_exhausted(self) -> bool:
        """True once the call layer made every call it allows: the generator ends the turn."""
        return self.call_layer is not None and self.call_layer.exhausted

    def feed(self, text: str) -> list[AnswerEvent]:
        """The answer events ``text`` makes available (possibly none while a tag is ambiguous)."""
        return self._route(self.text.feed(text), final=False)

    def finish(self) -> list[AnswerEvent]:
        """The events held back until the end of generation (a held partial tag, a call cut
        short); the turn is then ``done``."""
        out = self._route(self.text.feed("", final=True), final=True)
        self._ended = True
        return out

    @property
    def held(self) -> str:
        """The text held back for a possible stop string (read ahead by :attr:`phase`)."""
        return self._held

    def hold(self, held: str) -> None:
        """The text now held back for a possible stop string (see :attr:`phase`)."""
        self._held = held

    def unseen(self, text: str) -> None:
        """A token whose text is never shown was generated (a hidden special token): the
        reasoning layer reads an end text there (:meth:`TurnText.unseen`)."""
        self.text.unseen(text)

    def fork_text(self) -> TurnText:
        """A copy of the reasoning layer, held text read: for a search that tries tokens ahead
        (the budget closer's forks of the gate read their own tokens)."""
        twin = self.text.fork()
        if self._held:
            twin.feed(self._held)
        return twin

    def stop(self) -> None:
        """A stop string ended the turn: ``done`` (the text after it is never emitted)."""
        self._ended, self._held = True, ""

    def finish_reason(self, reason: FinishReason, *, whole: bool = False) -> FinishReason:
        """The wire finish reason for the generator's ``reason``: ``tool_calls`` when the call
        layer says so (see :meth:`Calls.finish_reason`); text alone never changes it (a whole
        JSON value cut by the budget is still cut: the model meant more)."""
        if self.call_layer is None:
            return reason
        return self.call_layer.finish_reason(reason, whole=whole)

    def _route(self, pieces: list[tuple[str, str]], *, final: bool) -> list[AnswerEvent]:
        out: list[AnswerEvent] = []
        calls = self.call_layer
        for channel, text in pieces:
            if channel == REASONING:
                add_text(out, Reasoning, calls.reasoning(text) if calls is not None else text)
            elif calls is None:
                add_text(out, Text, text)
            else:
                add_text(out, Reasoning, calls.reasoning("", end=True))  # the block ended
                calls.route(out, text)
        if final and calls is not None:
            add_text(out, Reasoning, calls.reasoning("", end=True))
            calls.finish(out)
        syntax = self.text.syntax
        if syntax is not None and syntax.tokens:  # a stray special token no layer read: structure
            for event in out:
                if isinstance(event, (Text, Reasoning)):
                    event.text = syntax.drop_tokens(event.text)
            out = [e for e in out if not isinstance(e, (Text, Reasoning)) or e.text]
        return out
