"""Incremental tool-call parser: generated text in, text and call events out, for one format.

The same parser reads constrained output (always well-formed) and free text from non-strict
tools, so it is lenient: text before, between and after calls stays text; a call's keys may come
in any order (arguments before the name are held until the name is known); ``parameters`` is
accepted for ``arguments``; arguments written as a JSON string are decoded; a block cut short
(the close marker or the end of generation inside the object) is closed by adding the missing
quotes and brackets; a block that never yields a name is given back as text.

Events: :class:`TextEvent`, :class:`CallStart` (index + full name), :class:`ArgsEvent` (a
fragment of the arguments' JSON text, as generated) and :class:`CallEnd`.  Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..turn.markers import Marker, MarkerScanner
from .formats import ToolFormat
from .scanner import WS as _WS
from .scanner import CallScanner


@dataclass
class TextEvent:
    """Plain text outside any call."""

    text: str


@dataclass
class CallStart:
    """A call's name is known: the first delta of call ``index``."""

    index: int
    name: str


@dataclass
class ArgsEvent:
    """A fragment of call ``index``'s arguments JSON."""

    index: int
    text: str


@dataclass
class CallEnd:
    """Call ``index`` is complete (its arguments are closed); ``cut``: closed by the parser,
    the call was cut short (by the end of generation or a malformed body)."""

    index: int
    cut: bool = False


ParseEvent = TextEvent | CallStart | ArgsEvent | CallEnd
_FENCE = re.compile(r"```[A-Za-z]*[ \t]*\r?\n")  # a markdown fence some models put around the JSON
# A call's name being written, then what began of the args marker (group 1).
_NAME_HEAD = re.compile(r"\s*[A-Za-z0-9_.:-]*\s*(.*)", re.DOTALL)


class CallParser:
    """Feeds answer text (thinking already removed) through the format's call syntax."""

    def __init__(self, fmt: ToolFormat, *, detect_calls: bool = True,
                 max_calls: int | None = None) -> None:
        self.fmt = fmt
        self.detect_calls = detect_calls
        self.max_calls = max_calls
        self.calls = 0
        self._state = "text"  # text, open (after a marker), object, between
        self._buf = ""
        self._opener = MarkerScanner((fmt.open,) if fmt.open else ())  # holds a partial marker
        self._raw = ""  # the current block's text, given back if it yields no call
        self._scan: CallScanner | None = None
        self._index: int | None = None  # index of the call in progress, once its name is known
        self._in_array = False
        self._pending_ws = ""
        self._after_call = False
        self._seen_text = False  # bare formats: a call can only open the answer
        self._args_only = False  # name_args formats: the scanner sees only the arguments object

    # -- public -------------------------------------------------------------------------------

    def feed(self, text: str) -> list[ParseEvent]:
        """Events made available by ``text`` (a marker prefix at the end is held back)."""
        out: list[ParseEvent] = []
        self._buf += text
        self._run(out, final=False)
        return out

    def finish(self) -> list[ParseEvent]:
        """End of generation: close a call cut short, give back held text."""
        out: list[ParseEvent] = []
        self._run(out, final=True)
        # A bare format's block cut before its name: after a call it is the next call's start
        # (only calls may follow one); else it may be the answer itself, given back.
        if self._state == "object" and not (self._index is None and (self.fmt.open or self.calls)):
            self._close_object(out, cut_short=True)
        # Else a call opened with the format's marker and cut before its name was whole (or
        # before its object began): call markup, which never reaches the client as content.
        self._state, self._raw = "text", ""
        self._scan, self._index = None, None
        if self._buf:
            self._text(out, self._buf)
            self._buf = ""
        if self._pending_ws and not self.calls:
            out.append(TextEvent(self._pending_ws))
        self._pending_ws = ""
        return out


    # -- states -------------------------------------------------------------------------------

    def _run(self, out: list[ParseEvent], *, final: bool) -> None:
        while self._buf or (final and self._opener.held):
            before = (self._state, len(self._buf))
            getattr(self, f"_st_{self._state}")(out, final)
            if (self._state, len(self._buf)) == before:
                return  # waiting for more text

    def _st_text(self, out: list[ParseEvent], final: bool) -> None:
        buf, marker = self._buf, self.fmt.open
        if not self.detect_calls:
            self._text(out, buf)
            self._buf = ""
            return
        if not marker:  # bare JSON calls: only where the answer (or the previous call) ends
            stripped = buf.lstrip(_WS)
            if not self._seen_text and stripped.startswith("{"):
                self._pending_ws = ""
                self._begin_block(buf[len(buf) - len(stripped):], out)
                return
            if not stripped and not final:
                return
            self._text(out, buf)
            self._buf = ""
            return
        self._buf = ""
        for piece in self._opener.feed(buf, final=False):
            if isinstance(piece, Marker):
                self._pending_ws = ""
                self._raw = piece.text
                self._buf = self._opener.take()  # the rest is the call's: the next states read it
                self._state = "open"
                return
            self._text(out, piece)
        if final:
            # What is held begins a call opener the budget cut ("<tool"): call markup, never
            # content; after a call too (only calls may follow one).  A lone "<" or "[" at the
            # end of text is as likely text, and is kept.
            held = self._opener.take()
            if len(held) < 2 and not self._after_call:
                self._text(out, held)

    def _st_open(self, out: list[ParseEvent], final: bool) -> None:
        if self.fmt.args_marker:
            self._open_named(out, final)
            return
        stripped = self._buf.lstrip(_WS)
        self._raw += self._buf[:len(self._buf) - len(stripped)]
        self._buf = stripped
        if not stripped:
            return
        fence = _FENCE.match(stripped)
        if fence:
            self._raw += fence.group()
            self._buf = stripped[fence.end():]
            return
        if stripped[0] == "`" and "\n" not in stripped and len(stripped) < 16:
            if final:  # the opener and the start of a fence, cut: call markup
                self._drop_block()
            return  # maybe a fence still being written
        if stripped[0] == "[":
            self._in_array = True
            self._raw += "["
            self._buf = stripped[1:]
            self._state = "between"
        elif stripped[0] == "{":
            self._begin_block(stripped, out)
        else:  # not a call after all: the marker was text
            self._state = "text"
            self._text(out, self._raw)
            self._raw = ""

    def _open_named(self, out: list[ParseEvent], final: bool) -> None:
        """``name<args marker>{...}``: the name is known at the marker; the arguments object is
        scanned as the value of a call object whose head is fed to the scanner (not the client)."""
        buf, marker = self._buf, self.fmt.args_marker
        at = buf.find(marker)
        if at < 0:
            if not final and len(buf) < 256 and not any(c in buf for c in "\n{"):
                return  # the name is still being written
            head = _NAME_HEAD.fullmatch(buf)
            if final and head is not None and marker.startswith(head.group(1)):
                self._drop_block()  # the marker and a name, cut before the arguments: call markup
                return
            self._state = "text"  # not a call after all: the marker was text
            self._text(out, self._raw)
            self._raw = ""
            return
        # The name ends at blank space or markup (Harmony writes a space before its marker).
        name = re.split(r"\s|<\|", buf[:at].strip(), maxsplit=1)[0]
        self._raw += buf[:at + len(marker)]
        self._buf = buf[at + len(marker):].lstrip(_WS)
        self._scan = CallScanner(self.fmt)
        self._index = None
        self._args_only = True
        key, args_key = json.dumps(self.fmt.name_key), json.dumps(self.fmt.arguments_key)
        for ch in f"{key}: {json.dumps(name)}, {args_key}: ":
            self._scan.feed(ch)
        self._state = "object"
        self._consume(out, "")

    def _drop_block(self) -> None:
        """A call's opening markup the end of generation cut: never content."""
        self._state, self._raw, self._buf = "text", "", ""

    def _begin_block(self, text: str, out: list[ParseEvent]) -> None:
        self._scan = CallScanner(self.fmt)
        self._args_only = False
        self._index = None
        self._buf = text[1:]
        self._raw += "{"
        self._state = "object"

    def _st_object(self, out: list[ParseEvent], final: bool) -> None:
        scan = self._scan
        assert scan is not None
        close = self.fmt.close
        i = 0
        buf = self._buf
        while i < len(buf):
            if close and not scan.in_string and buf.startswith(close[0], i):
                rest = buf[i:]
                if rest.startswith(close):  # the block closed inside the object: cut short
                    self._consume(out, buf[:i])
                    self._buf = buf[i:]
                    self._close_object(out, cut_short=True)
                    return
                if close.startswith(rest) and not final:
                    self._consume(out, buf[:i])
                    self._buf = rest
                    return
            scan.feed(buf[i])
            i += 1
            if self._args_only and scan.args_done:
                scan.feed("}")  # the call object the scanner was given a head for ends here
            if scan.state in ("done", "broken"):
                break
        self._consume(out, buf[:i])
        self._buf = buf[i:]
        if scan.state in ("done", "broken"):
            self._close_object(out, cut_short=scan.state == "broken")

    def _consume(self, out: list[ParseEvent], text: str) -> None:
        """Account for scanned ``text``: raw copy, call start once named, argument fragments."""
        scan = self._scan
        assert scan is not None
        if self._index is None:
            self._raw += text
            if scan.name is not None:
                self._start_call(out, scan.name)
        if self._index is not None:
            args = scan.take_args()
            if args and self._index >= 0:
                out.append(ArgsEvent(self._index, args))

    def _start_call(self, out: list[ParseEvent], name: str) -> None:
        if self.max_calls is not None and self.calls >= self.max_calls:
            self._index = -1  # over the limit: parse it, say nothing
            return
        self._index = self.calls
        self.calls += 1
        self._raw = ""
        out.append(CallStart(self._index, name))

    def _close_object(self, out: list[ParseEvent], *, cut_short: bool) -> None:
        scan = self._scan
        assert scan is not None
        if self._index is None:  # never named: not a call, give the text back
            self._text(out, self._raw)
            self._raw = ""
            self._state = "text"
            self._in_array = False
            return
        if self._index >= 0:
            args = scan.take_args() + (scan.repair() if cut_short else "")
            if not scan.args_seen:
                args = "{}"  # a call without arguments takes none
            if args:
                out.append(ArgsEvent(self._index, args))
            out.append(CallEnd(self._index, cut=cut_short))
        self._after_call = True
        self._args_only = False
        self._scan, self._index, self._raw = None, None, ""
        self._state = "between"

    def _st_between(self, out: list[ParseEvent], final: bool) -> None:
        close = self.fmt.close
        # Inside a block that has a close marker, stray brackets and fences before it are noise.
        buf = self._buf.lstrip(_WS + ",;" + ("`}]" if close else ""))
        self._buf = buf
        if not buf:
            return
        if buf[0] == "{":
            self._raw = ""
            self._begin_block(buf, out)
        elif self._in_array and buf[0] == "]":
            self._in_array = False
            self._buf = buf[1:]
        elif close and buf.startswith(close):
            self._buf = buf[len(close):]
            self._state = "text"
        elif close and close.startswith(buf):
            if final:
                self._buf = ""  # the block's close, cut: markup
            return
        elif self.fmt.open and buf.startswith(self.fmt.open):
            self._state = "text"  # the next block
        else:
            self._in_array = False
            self._state = "text"
            if not self.fmt.open:
                self._seen_text = True

    # -- text ---------------------------------------------------------------------------------

    def _text(self, out: list[ParseEvent], text: str) -> None:
        """Emit text; whitespace next to calls is layout, not content."""
        if self._after_call:
            text = text.lstrip(_WS)
            if not text:
                return
            self._after_call = False
        body = text.rstrip(_WS)
        if not body:
            self._pending_ws += text
            return
        self._seen_text = True
        out.append(TextEvent(self._pending_ws + body))
        self._pending_ws = text[len(body):]
