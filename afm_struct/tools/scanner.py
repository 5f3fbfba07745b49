"""One call object ``{"name": ..., "arguments": ...}`` scanned character by character.

The scanner knows JSON well enough to find the call's name (whole, once its string closes) and
to hand out the raw text of its arguments as it arrives, whatever the key order; extra keys are
skipped.  Arguments written as a JSON string are decoded as they stream.  Malformed input puts
it in the ``broken`` state instead of raising: the parser decides what the text was.
"""

from __future__ import annotations

import json

from .formats import ToolFormat
from .json_close import closing_suffix

WS = " \t\r\n"
_CLOSERS = {"{": "}", "[": "]"}


class _StringArgs:
    """Arguments written as a JSON string: decode escapes as soon as they are complete."""

    def __init__(self) -> None:
        self.raw = ""

    def add(self, ch: str) -> str:
        """Add one raw character; return the text decoded so far (escapes wait until whole)."""
        self.raw += ch
        cut = len(self.raw)
        at = self.raw.rfind("\\")
        if at >= 0:
            run_start = at
            while run_start > 0 and self.raw[run_start - 1] == "\\":
                run_start -= 1
            if (at - run_start) % 2 == 0:  # the last backslash opens an escape
                seq = self.raw[at:]
                if len(seq) == 1 or (seq[1] == "u" and len(seq) < 6):
                    cut = at
        if cut == 0:
            return ""
        try:
            text = json.loads('"' + self.raw[:cut] + '"')
        except ValueError:
            text = self.raw[:cut]
        self.raw = self.raw[cut:]
        return text


class CallScanner:
    """Scans one call object ``{"name": ..., "arguments": ...}`` character by character."""

    def __init__(self, fmt: ToolFormat) -> None:
        self.fmt = fmt
        self.state = "key?"  # key? key colon value? value after done broken
        self.key = ""
        self.role = "skip"  # what the current value is: name, args or skip
        self.name: str | None = None
        self.name_raw = ""
        self.args_seen = False
        self.args_done = False
        self.args_out: list[str] = []  # argument text not yet handed out
        self.args_text: list[str] = []  # all argument text so far (what repair completes)
        self.string_args: _StringArgs | None = None
        self.stack: list[str] = []  # open brackets inside the current value
        self.in_str = False
        self.esc = False
        self.scalar = False  # the value is a number/literal (ends at , } or whitespace)

    @property
    def in_string(self) -> bool:
        """Inside a JSON string (markers there are data, not structure)."""
        return self.in_str or self.state == "key"

    def take_args(self) -> str:
        out = "".join(self.args_out)
        self.args_out.clear()
        return out

    def feed(self, ch: str) -> None:
        """Consume one character (sets ``state`` to done or broken at the end)."""
        st = self.state
        if st == "key":
            if self.esc:
                self.esc = False
            elif ch == "\\":
                self.esc = True
            elif ch == '"':
                try:
                    self.key = json.loads('"' + self.key + '"')
                except ValueError:
                    pass
                self.state = "colon"
                return
            self.key += ch
        elif st == "key?":
            if ch == '"':
                self.key, self.state = "", "key"
            elif ch == "}":
                self.state = "done"
            elif ch not in WS and ch != ",":
                self.state = "broken"
        elif st == "colon":
            if ch == ":":
                self.state = "value?"
            elif ch not in WS:
                self.state = "broken"
        elif st == "value?":
            if ch in WS:
                return
            if self.key == self.fmt.name_key and self.name is None:
                self.role = "name"
            elif self.key in self.fmt.argument_keys and not self.args_seen:
                self.role, self.args_seen = "args", True
            else:
                self.role = "skip"
            self.state, self.stack, self.in_str, self.esc = "value", [], False, False
            self.scalar = ch not in '{["'
            if self.role == "args" and ch == '"':
                self.string_args = _StringArgs()
                self.in_str = True
                return
            self._value(ch)
        elif st == "value":
            self._value(ch)
        elif st == "after":
            if ch == ",":
                self.state = "key?"
            elif ch == "}":
                self.state = "done"
            elif ch not in WS:
                self.state = "broken"

    def _value(self, ch: str) -> None:
        if self.scalar and not self.in_str and (ch in ",}" or ch in WS):
            self._end_value()
            self.feed(ch)  # the terminator belongs to the object
            return
        if self.string_args is not None:
            if self.esc:
                self.esc = False
            elif ch == "\\":
                self.esc = True
            elif ch == '"':
                self.args_out.append(json.loads('"' + self.string_args.raw + '"')
                                     if self.string_args.raw else "")
                self.string_args.raw = ""
                self._end_value()
                return
            self.args_out.append(self.string_args.add(ch))
            return
        self._emit(ch)
        if self.in_str:
            if self.esc:
                self.esc = False
            elif ch == "\\":
                self.esc = True
            elif ch == '"':
                self.in_str = False
                if not self.stack and not self.scalar:
                    self._end_value()
        elif ch == '"':
            self.in_str = True
        elif ch in _CLOSERS:
            self.stack.append(_CLOSERS[ch])
        elif ch in "]}":
            if self.stack and self.stack[-1] == ch:
                self.stack.pop()
            if not self.stack:
                self._end_value()

    def _emit(self, ch: str) -> None:
        if self.role == "args":
            self.args_out.append(ch)
            self.args_text.append(ch)
        elif self.role == "name":
            self.name_raw += ch

    def _end_value(self) -> None:
        if self.role == "name":
            try:
                value = json.loads(self.name_raw)
            except ValueError:
                value = None
            self.name = value if isinstance(value, str) and value else None
        elif self.role == "args":
            self.args_done = True
        self.role, self.state, self.in_str, self.esc = "skip", "after", False, False
        self.string_args = None

    def repair(self) -> str:
        """What makes arguments cut short parse (the text already went out: only appended)."""
        if self.role != "args" or self.args_done:
            return ""
        if self.string_args is not None:
            return ""
        return closing_suffix("".join(self.args_text))
