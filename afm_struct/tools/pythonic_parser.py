"""Streaming parser for the ``pythonic`` body: ``[f(a=1, b="x"), g()]`` read back as JSON.

The call list can only open the answer (after blank space and the format's markup, such as
Llama 4's ``<|python_start|>``); anything else is text.  Each call's name goes out when its
``(`` is read; each keyword argument goes out when its value ends, converted from the Python
literal to JSON (``True`` → ``true``, ``None`` → ``null``, tuples → arrays); a value that is not
a literal is kept as the string of its source text.  Events are those of
:mod:`afm_struct.tools.parser`.  Pure: no I/O.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from enum import Enum, auto
from typing import Any

from .answer_text import AnswerText
from .formats import ToolFormat
from .parser import ArgsEvent, CallEnd, CallStart, ParseEvent
from .scanner import WS

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
MAX_NAME = 256
_OPEN = "([{"
_CLOSE = ")]}"


class State(Enum):
    """Where the parser is in the text."""

    START = auto()  # the answer's start: a call list may open here
    LIST = auto()  # inside the list, between calls
    NAME = auto()  # reading a call's name
    ARGS = auto()  # inside a call, between keyword arguments
    KEY = auto()  # reading a keyword
    VALUE = auto()  # reading a value
    TEXT = auto()  # the rest is text


def literal_json(source: str) -> Any:
    """The JSON value of a Python literal's source (its source text when it is not one)."""
    try:
        value = ast.literal_eval(source.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return source.strip()
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return source.strip()
    return value if not isinstance(value, tuple) else list(value)


class PythonicCallParser:
    """Feeds answer text (thinking already removed) through the pythonic call syntax."""

    def __init__(self, fmt: ToolFormat, *, detect_calls: bool = True,
                 max_calls: int | None = None) -> None:
        self.fmt = fmt
        self.detect_calls = detect_calls
        self.max_calls = max_calls
        self.calls = 0
        self.state = State.START if detect_calls else State.TEXT
        self._buf = ""
        self._raw = ""
        self._text = AnswerText()
        self._index = -1
        self._members = 0
        self._key = ""
        self._scan = 0  # how far the value in the buffer was scanned
        self._stack: list[str] = []
        self._quote = ""
        self._escape = False
        self._steps: dict[State, Callable[[list[ParseEvent], bool], bool]] = {
            State.START: self._in_start, State.LIST: self._in_list, State.NAME: self._in_name,
            State.ARGS: self._in_args, State.KEY: self._in_key, State.VALUE: self._in_value,
            State.TEXT: self._in_text}

    def feed(self, text: str) -> list[ParseEvent]:
        """Events made available by ``text``."""
        out: list[ParseEvent] = []
        self._buf += text
        self._run(out, final=False)
        return out

    def finish(self) -> list[ParseEvent]:
        """End of generation: a call cut short is closed; held text goes out."""
        out: list[ParseEvent] = []
        self._run(out, final=True)
        if self.state is State.VALUE:
            # A literal cut short is closed (its quote and brackets are syntax, not value).
            source = self._buf[:-1] if self._escape else self._buf
            self._end_value(out, source + self._quote + "".join(reversed(self._stack)))
            self._buf = ""
        if self.state in (State.ARGS, State.KEY, State.VALUE):
            self._end_call(out, cut=True)
            self._buf = ""  # a key cut short: call markup
        elif self.state in (State.START, State.NAME) and self._raw + self._buf:
            self._text.add(out, self._raw + self._buf)  # never a call
            self._buf = ""
        self.state = State.TEXT
        if self._buf:
            self._text.add(out, self._buf)
            self._buf = ""
        self._text.finish(out, calls=self.calls)
        return out

    def _run(self, out: list[ParseEvent], *, final: bool) -> None:
        while self._steps[self.state](out, final):
            pass

    def _not_a_call(self, out: list[ParseEvent]) -> bool:
        self._text.add(out, self._raw + self._buf)
        self._raw, self._buf = "", ""
        self.state = State.TEXT
        return False

    def _in_start(self, out: list[ParseEvent], final: bool) -> bool:
        s = self._buf.lstrip(WS)
        for tag in self.fmt.extra_markup:
            if s.startswith(tag):
                self._raw += self._buf[:len(self._buf) - len(s)] + tag
                self._buf = s[len(tag):]
                return True
            if tag.startswith(s) and s and not final:
                return False
        if not s:
            if final:
                return False
            self._raw += self._buf
            self._buf = ""
            return False
        if not s.startswith(self.fmt.layout.list_open):
            return self._not_a_call(out)
        self._raw += self._buf[:len(self._buf) - len(s)] + self.fmt.layout.list_open
        self._buf = s[len(self.fmt.layout.list_open):]
        self.state = State.NAME
        return True

    def _in_list(self, out: list[ParseEvent], final: bool) -> bool:
        s = self._buf.lstrip(WS + ",")
        self._buf = s
        if not s:
            return False
        if s.startswith(self.fmt.layout.list_close):
            self._buf = s[len(self.fmt.layout.list_close):]
            self.state = State.TEXT
            return True
        self.state = State.NAME
        return True

    def _in_name(self, out: list[ParseEvent], final: bool) -> bool:
        s = self._buf.lstrip(WS)
        at = s.find("(")
        if at < 0:
            if len(s) < MAX_NAME and (not s or NAME.fullmatch(s)):
                if final:  # a call cut before its arguments (text never starts a list): markup
                    self._raw, self._buf = "", ""
                    self.state = State.TEXT
                return False
            return self._not_a_call(out) if not self.calls else self._to_text()
        name = s[:at].strip()
        if not NAME.fullmatch(name):
            return self._not_a_call(out) if not self.calls else self._to_text()
        self._buf = s[at + 1:]
        self._raw = ""
        self._members = 0
        self.state = State.ARGS
        if self.max_calls is not None and self.calls >= self.max_calls:
            self._index = -1
            return True
        self._index = self.calls
        self.calls += 1
        self._text.call_starts()
        out.append(CallStart(self._index, name))
        return True

    def _to_text(self) -> bool:
        self.state = State.TEXT
        return True

    def _in_args(self, out: list[ParseEvent], final: bool) -> bool:
        s = self._buf.lstrip(WS + ",")
        self._buf = s
        if not s:
            return False
        if s[0] == ")":
            self._buf = s[1:]
            self._end_call(out)
            self.state = State.LIST
            return True
        self.state = State.KEY
        return True

    def _in_key(self, out: list[ParseEvent], final: bool) -> bool:
        at = self._buf.find("=")
        if at < 0:
            if len(self._buf) > MAX_NAME:  # not a key: the call ends here, the rest is text
                self._end_call(out)
                return self._to_text()
            return False  # at the end: a key cut short, dropped by finish
        self._key = self._buf[:at].strip()
        self._buf = self._buf[at + 1:]
        self._scan, self._stack, self._quote, self._escape = 0, [], "", False
        self.state = State.VALUE
        return True

    def _in_value(self, out: list[ParseEvent], final: bool) -> bool:
        buf = self._buf
        i = self._scan
        while i < len(buf):
            ch = buf[i]
            if self._quote:
                if self._escape:
                    self._escape = False
                elif ch == "\\":
                    self._escape = True
                elif ch == self._quote:
                    self._quote = ""
            elif ch in "\"'":
                self._quote = ch
            elif ch in _OPEN:
                self._stack.append(_CLOSE[_OPEN.index(ch)])
            elif ch in _CLOSE and self._stack:
                self._stack.pop()
            elif ch in ",)" and not self._stack:
                self._end_value(out, buf[:i])
                self._buf = buf[i:]
                self.state = State.ARGS
                return True
            i += 1
        self._scan = i
        return False

    def _end_value(self, out: list[ParseEvent], source: str) -> None:
        head = "{" if not self._members else ", "
        self._members += 1
        value = json.dumps(literal_json(source), ensure_ascii=False)
        self._args(out, f"{head}{json.dumps(self._key, ensure_ascii=False)}: {value}")

    def _args(self, out: list[ParseEvent], text: str) -> None:
        if self._index >= 0:
            out.append(ArgsEvent(self._index, text))

    def _end_call(self, out: list[ParseEvent], *, cut: bool = False) -> None:
        self._args(out, "}" if self._members else "{}")
        if self._index >= 0:
            out.append(CallEnd(self._index, cut=cut))
        self._text.call_ends()

    def _in_text(self, out: list[ParseEvent], final: bool) -> bool:
        if self._buf:
            self._text.add(out, self._buf)
            self._buf = ""
        return False
