"""The call layer of a request's turn: answer text → tool-call events, markup stripped.

The request's :class:`~afm_struct.turn.turn.Turn` splits a thinking block off (the block may
have been opened by the prompt) and gives the answer text to a :class:`CallRouting`, which runs
it through the format's :class:`~afm_struct.tools.parser.CallParser` and is the turn's ``call``
phase (between a call's start and its end).  :class:`ToolCallRouter` is that turn built from a
format.  Each call gets an ``index`` and an id
``call_<hex>``; :class:`CallOpened` carries the whole name, :class:`CallArguments` the
arguments as they are generated, :class:`CallClosed` says they are complete.  A turn with calls
finishes with ``tool_calls``.  Tool markup never reaches the client as content: the format's tags that
the parser leaves in the text (a model echoing ``<tool_response>…</tool_response>`` after a tool
result, a stray ``</tool_call>``, an opener not followed by a call) are removed by a
:class:`MarkupStripper`.  Pure state machine: no I/O, no MLX.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from ..turn.events import AnswerEvent, CallArguments, CallClosed, CallOpened, Text, add_text
from ..turn.markers import Marker, MarkerScanner
from ..turn.outputs import FinishReason
from ..turn.reasoning import ReasoningTags, syntax_of
from ..turn.turn import Turn
from .call_deltas import ToolCall, ToolCallAssembler
from .formats import ToolFormat
from .parser import ArgsEvent, CallEnd, CallParser, CallStart, ParseEvent, TextEvent
from .scanner import WS
from .syntaxes import ToolDef, make_call_parser


def new_call_id() -> str:
    """A fresh OpenAI-style call id (``call_`` + 24 hex digits)."""
    return "call_" + secrets.token_hex(12)


class CallRouting:
    """The call layer of a :class:`~afm_struct.turn.turn.Turn` with tools: answer text through
    the format's parser to call events, markup stripped from the content, calls assembled.

    ``detect_calls=False`` (``tool_choice: none``) passes the answer through as content;
    ``max_calls=1`` (``parallel_tool_calls: false``) keeps only the first call;
    ``calls_only`` (``tool_choice`` required or named: the grammar writes no text outside the
    calls) gives no content: text there is a call's opener the budget cut.
    """

    def __init__(self, fmt: ToolFormat, *, detect_calls: bool = True, max_calls: int | None = None,
                 calls_only: bool = False,
                 id_factory: Callable[[], str] = new_call_id, tools: tuple[ToolDef, ...] = ()) -> None:
        self.format = fmt
        # The format's writing picks the parser; ``tools`` types the values of non-JSON writings.
        self.parser: CallParser = make_call_parser(fmt, tools=tools, detect_calls=detect_calls,
                                                   max_calls=max_calls)
        self.markup = MarkupStripper(fmt.markup)
        self.calls_only = calls_only
        self.max_calls = max_calls
        self._closed = 0  # calls whose end was read
        self._call_last = False  # the last thing routed was a whole call (no text after it)
        self._open: int | None = None  # the index of the call being written (the turn's ``call``)
        self.id_factory = id_factory
        # The calls so far, assembled from the fragments this layer streams (the same
        # assembler the server's non-streaming body and the client use).
        self.assembled = ToolCallAssembler()

    @property
    def in_call(self) -> bool:
        """True between a call's start (its name is known) and its end."""
        return self._open is not None

    @property
    def calls(self) -> list[ToolCall]:
        """The calls made so far, whole (index order)."""
        return self.assembled.calls

    @property
    def exhausted(self) -> bool:
        """True once ``max_calls`` calls are whole: the turn is over (the generator ends it
        there rather than let the model write calls no one is shown)."""
        return self.max_calls is not None and self._closed >= self.max_calls

    def route(self, out: list[AnswerEvent], text: str) -> None:
        """Append the events of answer text ``text``."""
        self._events(out, self.parser.feed(text))

    def reasoning(self, text: str, *, end: bool = False) -> str:
        """Thinking text with the format's tags removed: kept tokens (this layer reads them in
        the answer), each a whole piece of text; nothing is held, so reasoning goes out in the
        step that wrote it (``end`` has nothing to give)."""
        for tag in self.format.markup:
            text = text.replace(tag, "")
        return "" if end else text

    def finish(self, out: list[AnswerEvent]) -> None:
        """Append the events held back until the end (partial markers, a call cut short)."""
        self._events(out, self.parser.finish())
        self._content(out, self.markup.end(calls=bool(self.calls)))

    def finish_reason(self, reason: FinishReason, *, whole: bool = False) -> FinishReason:
        """``tool_calls`` when the turn made calls and stopped normally, or when the budget
        ended it right after a whole call (``whole``: the model's text was complete there, and
        the next call it began could not fit: the calls made are the answer, as if it had
        stopped); else ``reason``."""
        if not self.calls:
            return reason
        if reason == FinishReason.STOP or (reason == FinishReason.LENGTH and whole and self._call_last):
            return FinishReason.TOOL_CALLS
        return reason

    # -- internals ----------------------------------------------------------------------------

    def _events(self, out: list[AnswerEvent], events: list[ParseEvent]) -> None:
        for ev in events:
            if isinstance(ev, TextEvent):
                self._content(out, self.markup.feed(ev.text))
            elif isinstance(ev, CallStart):
                self._content(out, self.markup.feed("", final=True))  # held text first, in order
                self._call_last, self._open = False, ev.index
                opened = CallOpened(index=ev.index, id=self.id_factory(), name=ev.name)
                self.assembled.add({"index": ev.index, "id": opened.id, "type": "function",
                                    "function": {"name": ev.name, "arguments": ""}})
                out.append(opened)
            elif isinstance(ev, ArgsEvent):
                self.assembled.add({"index": ev.index, "function": {"arguments": ev.text}})
                last = out[-1] if out else None
                if isinstance(last, CallOpened) and last.index == ev.index:
                    last.arguments += ev.text  # same step: one fragment
                elif isinstance(last, CallArguments) and last.index == ev.index:
                    last.text += ev.text
                else:
                    out.append(CallArguments(index=ev.index, text=ev.text))
            elif isinstance(ev, CallEnd):
                self._call_last, self._open = True, None  # the client parses arguments at the end
                self._closed += 1
                out.append(CallClosed(ev.index, cut=ev.cut))

    def _content(self, out: list[AnswerEvent], text: str) -> None:
        if self.calls_only:
            return
        add_text(out, Text, text)
        if text.strip():
            self._call_last = False


class ToolCallRouter(Turn):
    """The :class:`~afm_struct.turn.turn.Turn` of a request with tools, built from its format
    (the name the tool code and its tests use): text, reasoning and streamed tool calls.  A
    format with its own reasoning channel (Harmony's analysis) splits it off itself."""

    def __init__(self, fmt: ToolFormat, *, detect_calls: bool = True, max_calls: int | None = None,
                 calls_only: bool = False,
                 reasoning_tags: ReasoningTags | tuple[str, str] | None = None,
                 start_in_reasoning: bool = False,
                 id_factory: Callable[[], str] = new_call_id, tools: tuple[ToolDef, ...] = ()) -> None:
        super().__init__(reasoning_tags or syntax_of(fmt.reasoning), start_in_reasoning=start_in_reasoning,
                         calls=CallRouting(fmt, detect_calls=detect_calls, max_calls=max_calls,
                                           calls_only=calls_only, id_factory=id_factory, tools=tools))

    @property
    def parser(self) -> CallParser:
        """The format's call parser."""
        assert isinstance(self.call_layer, CallRouting)
        return self.call_layer.parser


class MarkupStripper:
    """Content text with a tool format's tags removed, as it streams.

    A partial tag at the end of a piece is held back until it is decided (``final`` gives it
    out as text; at the :meth:`end` it is markup cut short unless it is a lone character of a
    turn without calls).  Whitespace next to a removed tag is the markup's layout: what follows
    a tag is dropped up to the next text, what precedes one is kept only if text follows.
    """

    def __init__(self, tags: tuple[str, ...]) -> None:
        self._scan = MarkerScanner(tags)
        self._space = ""  # whitespace at the end of the text given out so far, held back
        self._after_tag = False  # since the last text, a tag was removed

    def feed(self, text: str, *, final: bool = False) -> str:
        """The content of ``text`` (``final``: the end, or a call starts: nothing is held)."""
        out: list[str] = []
        for piece in self._scan.feed(text, final=final):
            self._piece(out, piece)
        if final:
            self._flush(out)
        return "".join(out)

    def end(self, *, calls: bool) -> str:
        """The content still held at the end of generation.  A tag begun there (``</tool``,
        ``<|start|>assis``) was cut by the budget: markup, never content; only a lone
        character of a turn without calls (``<``) is as likely text, and goes out."""
        out: list[str] = []
        for piece in self._scan.feed(""):
            self._piece(out, piece)
        held = self._scan.take()
        if held:
            self._piece(out, held if len(held) < 2 and not calls else Marker(held))
        self._flush(out)
        return "".join(out)

    def _piece(self, out: list[str], piece: str | Marker) -> None:
        if isinstance(piece, Marker):
            self._after_tag = True
            return
        if self._after_tag:
            piece = piece.lstrip(WS)
            if not piece:
                return
        body = piece.rstrip(WS)
        if not body:
            self._space += piece
            return
        out.append(self._space + body)
        self._space, self._after_tag = piece[len(body):], False

    def _flush(self, out: list[str]) -> None:
        if not self._after_tag:
            out.append(self._space)
        self._space, self._after_tag = "", False
