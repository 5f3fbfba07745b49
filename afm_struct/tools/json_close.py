"""The text that makes a cut-off JSON value parse, for tool arguments already streamed.

Arguments stream to the client as they are generated, so a call cut by ``max_tokens`` (with
budget-aware closing off, or where the grammar cannot be searched) can only be *completed*:
nothing sent can be taken back.  :func:`closing_suffix` returns what to append to a prefix of a
JSON value so that the whole parses: the rest of an escape or a literal, a closing quote, a
missing ``: null`` after a dangling key, a ``null`` after a dangling ``:`` or ``,``, then the
open brackets closed innermost first.  The result parses; it need not match the tool's schema
(the grammar's own shortest completion, when it can run, does that).
"""

from __future__ import annotations

_LITERALS = ("true", "false", "null")
_NUMBER_TAIL = "-+.eE"


def closing_suffix(text: str) -> str:
    """What to append to ``text``, a prefix of one JSON value, so that it parses."""
    # Each open container: [closer, expecting] where expecting is one of
    # "key" (object, after "{"), "key!" (after ","), "colon", "value" (after ":"),
    # "item" (array, after "["), "item!" (after ","), "more" (after a complete member).
    stack: list[list[str]] = []
    in_str = esc = False
    key_str = False  # the open string is an object key
    hex_left = -1  # hex digits still owed by a \u escape
    scalar = ""  # a number or literal being written
    for ch in text:
        if in_str:
            if hex_left > 0:
                hex_left -= 1
            elif esc:
                esc = False
                hex_left = 4 if ch == "u" else -1
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
                _member_done(stack, key_str)
            continue
        if scalar and (ch in ",]}:" or ch.isspace()):
            scalar = ""
            _member_done(stack, False)
        if ch.isspace():
            continue
        if ch == '"':
            in_str, esc, hex_left = True, False, -1
            key_str = bool(stack) and stack[-1][1] in ("key", "key!")
        elif ch in "{[":
            _member_done(stack, False)  # closing the new container completes the member
            stack.append(["}" if ch == "{" else "]", "key" if ch == "{" else "item"])
        elif ch in "}]":
            if stack:
                stack.pop()
            _member_done(stack, False)
        elif ch == ",":
            if stack:
                stack[-1][1] = "key!" if stack[-1][0] == "}" else "item!"
        elif ch == ":":
            if stack:
                stack[-1][1] = "value"
        else:
            scalar += ch
    out = ""
    if in_str:
        if esc:
            out += "\\"  # a lone backslash: make it an escaped one
        elif hex_left > 0:
            out += "0" * hex_left
        out += '"'
        _member_done(stack, key_str)
    elif scalar:
        out += _finish_scalar(scalar)
        _member_done(stack, False)
    for closer, expecting in reversed(stack):
        if expecting == "key!":
            out += '"": null'
        elif expecting == "colon":
            out += ": null"
        elif expecting in ("value", "item!"):
            out += "null"
        out += closer
    if not text.strip():
        out = "null"
    return out


def _member_done(stack: list[list[str]], was_key: bool) -> None:
    """A string, scalar or container just ended inside the top container."""
    if stack:
        stack[-1][1] = "colon" if was_key else "more"


def _finish_scalar(scalar: str) -> str:
    """The rest of a number or literal cut mid-way (``tr`` → ``ue``, ``1.`` → ``0``)."""
    for word in _LITERALS:
        if word.startswith(scalar):
            return word[len(scalar):]
    return "0" if scalar[-1] in _NUMBER_TAIL else ""
