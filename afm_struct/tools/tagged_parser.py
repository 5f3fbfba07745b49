"""Streaming parser for the ``tagged`` body: tag-pair arguments read back as JSON text.

One parser for every syntax of this kind; the format's :class:`~afm_struct.tools.formats.Layout`
says where the name and each key and value sit.  Arguments go out as JSON text as they arrive:
``{"key": `` when a key is read, a string parameter's raw value escaped character by character
(holding back only what could begin its closing tag), a non-string value whole once its closing
tag comes (it is parsed as JSON, and kept as a string if it is not JSON), ``}`` when the call
ends.  Whitespace inside the markup is lenient; the value's own text is exact: the layout's
line break after the key and before the closing tag is the template's, not the value's.

Events are those of :mod:`afm_struct.tools.parser`.  Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from enum import Enum, auto
from typing import Any

from ..grammar.spec import ToolDef
from ..turn.markers import Marker, MarkerScanner
from .answer_text import AnswerText
from .formats import ToolFormat
from .parser import ArgsEvent, CallEnd, CallStart, ParseEvent
from .scanner import WS
from .values import is_raw_string, property_schemas, read_value

MAX_HEAD = 256  # a name or key longer than this is not one: the text was not a call
CALL_NAME = re.compile(r"[A-Za-z0-9_.:-]+")  # a function name (OpenAI's, plus dotted names)


class State(Enum):
    """Where the parser is in the text."""

    TEXT = auto()  # outside calls, looking for the opener
    HEAD = auto()  # after the opener, reading the function name
    PARAMS = auto()  # inside a call, between parameters
    KEY = auto()  # reading a parameter's key
    KEY_AFTER = auto()  # the markup between a key and its value
    VALUE = auto()  # reading a parameter's value
    CALL_DONE = auto()  # the call's own end tag was read; the block's close may follow


def _lead(text: str) -> str:
    return text[:len(text) - len(text.lstrip(WS))]


def _trail(text: str) -> str:
    return text[len(text.rstrip(WS)):]


def _without_cut_tag(text: str, tag: str) -> str:
    """``text`` without its longest suffix that begins ``tag`` (a closing tag the budget cut)."""
    for n in range(min(len(tag), len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return text[:-n]
    return text


class TaggedCallParser:
    """Feeds answer text (thinking already removed) through a tag-pair call syntax."""

    def __init__(self, fmt: ToolFormat, *, tools: tuple[ToolDef, ...] = (), detect_calls: bool = True,
                 max_calls: int | None = None) -> None:
        lay = fmt.layout
        self.fmt = fmt
        self.detect_calls = detect_calls
        self.max_calls = max_calls
        self.calls = 0
        self._name_before = lay.name_before.strip()
        self._name_after = lay.name_after.strip()
        self._key_before = lay.key_before.strip()
        self._key_parts = lay.key_after.split()
        self._key_tail = _trail(lay.key_after)
        self._value_end = lay.value_after.strip()
        self._value_lead = _lead(lay.value_after)
        self._call_after = lay.call_after.strip()
        self._close = fmt.close.strip()
        self._props = {t.name: property_schemas(t.parameters) for t in tools}
        self._opener = MarkerScanner((fmt.open,)) if fmt.open else MarkerScanner()
        self._text = AnswerText()
        self._buf = ""
        self._raw = ""  # the block's text so far, given back if it is not a call
        self.state = State.TEXT
        self._index = -1  # the call being read (-1: over max_calls, parsed silently)
        self._schemas: dict[str, Any] = {}
        self._members = 0
        self._key = ""
        self._part = 0
        self._raw_value = False
        self._value = ""  # a non-string value, held whole
        self._steps: dict[State, Callable[[list[ParseEvent], bool], bool]] = {
            State.TEXT: self._in_text, State.HEAD: self._in_head, State.PARAMS: self._in_params,
            State.KEY: self._in_key, State.KEY_AFTER: self._in_key_after,
            State.VALUE: self._in_value, State.CALL_DONE: self._in_call_done}

    # -- public -------------------------------------------------------------------------------

    def feed(self, text: str) -> list[ParseEvent]:
        """Events made available by ``text`` (what could begin a tag is held back)."""
        out: list[ParseEvent] = []
        self._buf += text
        self._run(out, final=False)
        return out

    def finish(self) -> list[ParseEvent]:
        """End of generation: a call cut short is closed; held text goes out."""
        out: list[ParseEvent] = []
        self._run(out, final=True)
        if self.state is State.VALUE:
            # What was held is the value's closing tag cut short ("\n</para"): markup, not value.
            self._end_value(out, _without_cut_tag(self._buf, self._value_lead + self._value_end))
            self._buf = ""
        if self.state in (State.PARAMS, State.KEY, State.KEY_AFTER, State.VALUE):
            self._end_call(out, cut=True)
            self._buf = ""  # the rest of the call's markup, cut short (a key, a closing tag)
        elif self.state is State.HEAD:
            self._buf = ""  # the layout after the opener: the name never came
        # A block cut before its name was whole is call markup: it never reaches the client.
        self.state, self._raw = State.TEXT, ""
        if self._buf:
            self._text.add(out, self._buf)
            self._buf = ""
        self._text.finish(out, calls=self.calls)
        return out

    # -- states -------------------------------------------------------------------------------

    def _run(self, out: list[ParseEvent], *, final: bool) -> None:
        while self._steps[self.state](out, final):
            pass

    def _in_text(self, out: list[ParseEvent], final: bool) -> bool:
        if not self._buf and not (final and self._opener.held):
            return False
        buf, self._buf = self._buf, ""
        if not self.detect_calls or not self.fmt.open:
            self._text.add(out, buf)
            return False
        for piece in self._opener.feed(buf):
            if isinstance(piece, Marker):
                self._text.call_starts()
                self._raw = piece.text
                self._buf = self._opener.take()
                self.state = State.HEAD
                return True
            self._text.add(out, piece)
        if final:
            self._text.add(out, self._text.cut_opener(self._opener.take()))
        return False

    def _not_a_call(self, out: list[ParseEvent]) -> bool:
        """The opener was text after all: give it back."""
        self._text.add(out, self._raw + self._buf)
        self._raw, self._buf = "", ""
        self.state = State.TEXT
        return False

    def _in_head(self, out: list[ParseEvent], final: bool) -> bool:
        s = self._buf.lstrip(WS)
        if not s:
            return False
        rest = s
        if self._name_before:
            if not s.startswith(self._name_before):
                if self._name_before.startswith(s):
                    return self._cut_head(final)
                return self._not_a_call(out)
            rest = s[len(self._name_before):]
        # The name ends at the layout's name_after (GLM's is a bare line break).
        end = self._name_after or self.fmt.layout.name_after or "\n"
        at = rest.find(end)
        if at < 0:
            if len(rest) > MAX_HEAD or (rest and not CALL_NAME.fullmatch(rest)):
                return self._not_a_call(out)
            return self._cut_head(final)
        name = rest[:at].strip()
        if not CALL_NAME.fullmatch(name):
            return self._not_a_call(out)
        self._buf = rest[at + len(end):]
        self._start_call(out, name)
        return True

    def _cut_head(self, final: bool) -> bool:
        """The head may still become a call: wait, or at the end drop it (the budget cut the
        call's opening markup: it is not text)."""
        if final:
            self._raw, self._buf = "", ""
            self.state = State.TEXT
        return False

    def _start_call(self, out: list[ParseEvent], name: str) -> None:
        self._raw = ""
        self._members = 0
        self._schemas = self._props.get(name, {})
        self.state = State.PARAMS
        if self.max_calls is not None and self.calls >= self.max_calls:
            self._index = -1
            return
        self._index = self.calls
        self.calls += 1
        out.append(CallStart(self._index, name))

    def _args(self, out: list[ParseEvent], text: str) -> None:
        if text and self._index >= 0:
            out.append(ArgsEvent(self._index, text))

    def _end_call(self, out: list[ParseEvent], *, cut: bool = False) -> None:
        self._args(out, "}" if self._members else "{}")
        if self._index >= 0:
            out.append(CallEnd(self._index, cut=cut))
        self._text.call_ends()

    def _in_params(self, out: list[ParseEvent], final: bool) -> bool:
        s = self._buf.lstrip(WS)
        self._buf = s
        if not s:
            return False
        for tag, then in ((self._key_before, State.KEY), (self._call_after, State.CALL_DONE),
                          (self._close, State.TEXT)):
            if tag and s.startswith(tag):
                self._buf = s[len(tag):]
                if then is not State.KEY:
                    self._end_call(out)
                self.state, self._part = then, 0
                return True
        if any(t.startswith(s) for t in (self._key_before, self._call_after, self._close) if t):
            return False  # a tag being written (at the end: cut short, dropped by finish)
        self._end_call(out)  # something else: the call ends here, the rest is text
        self.state = State.TEXT
        return True

    def _in_key(self, out: list[ParseEvent], final: bool) -> bool:
        part = self._key_parts[0] if self._key_parts else ""
        at = self._buf.find(part) if part else next(
            (i for i, ch in enumerate(self._buf) if ch in WS), -1)
        if at < 0:
            if len(self._buf) > MAX_HEAD:
                self._end_call(out)
                self.state = State.TEXT
                return True
            return False  # at the end: a key cut short, dropped by finish
        self._key = self._buf[:at].strip()
        self._buf = self._buf[at + len(part):]
        self.state, self._part = State.KEY_AFTER, 1
        return True

    def _in_key_after(self, out: list[ParseEvent], final: bool) -> bool:
        while self._part < len(self._key_parts):
            part = self._key_parts[self._part]
            s = self._buf.lstrip(WS)
            if s.startswith(part):
                self._buf = s[len(part):]
                self._part += 1
            elif part.startswith(s):
                if not final:
                    return False
                self._buf = ""  # the markup before the value, cut: the value is empty
                break
            else:
                break  # lenient: the value starts here
        tail = self._key_tail
        if tail and not self._buf.startswith(tail):
            if tail.startswith(self._buf) and not final:
                return False
        elif tail:
            self._buf = self._buf[len(tail):]
        self._begin_value(out)
        return True

    def _begin_value(self, out: list[ParseEvent]) -> None:
        schema = self._schemas.get(self._key)
        self._raw_value = is_raw_string(schema)
        self._value = ""
        head = ("{" if not self._members else ", ") + json.dumps(self._key, ensure_ascii=False) + ": "
        self._members += 1
        self._args(out, head + ('"' if self._raw_value else ""))
        self.state = State.VALUE

    def _in_value(self, out: list[ParseEvent], final: bool) -> bool:
        at = self._buf.find(self._value_end)
        if at >= 0:
            text = self._buf[:at]
            self._buf = self._buf[at + len(self._value_end):]
            if self._value_lead and text.endswith(self._value_lead):
                text = text[:-len(self._value_lead)]
            self._end_value(out, text)
            self.state = State.PARAMS
            return True
        if final:
            return False
        keep = len(self._value_lead) + len(self._value_end) - 1
        cut = max(0, len(self._buf) - keep)
        if cut:
            self._value_text(out, self._buf[:cut])
            self._buf = self._buf[cut:]
        return False

    def _value_text(self, out: list[ParseEvent], text: str) -> None:
        if self._raw_value:
            self._args(out, json.dumps(text, ensure_ascii=False)[1:-1])
        else:
            self._value += text

    def _end_value(self, out: list[ParseEvent], text: str) -> None:
        self._value_text(out, text)
        if self._raw_value:
            self._args(out, '"')
        else:
            value = read_value(self._schemas.get(self._key), self._value)
            self._args(out, json.dumps(value, ensure_ascii=False))
        self._value = ""

    def _in_call_done(self, out: list[ParseEvent], final: bool) -> bool:
        s = self._buf.lstrip(WS)
        if not s and not final:
            return False
        if self._close and s.startswith(self._close):
            self._buf = s[len(self._close):]
        elif self._close and self._close.startswith(s) and s:
            if not final:
                return False
            self._buf = ""  # the block's close cut short: markup
        self.state = State.TEXT
        return bool(self._buf) or (final and bool(self._opener.held))
