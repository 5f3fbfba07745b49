"""A custom tool's Lark grammar, rewritten to constrain its input written as a JSON string.

A custom tool's input travels inside the model's tool-call markup as the JSON string of
``{"input": "..."}``, so its grammar must describe the escaped text: every terminal is rewritten
to the JSON escaping of what it matches (``"`` as ``\\"``, ``\\`` as ``\\\\``, a newline as
``\\n``, other control characters as ``\\u00XX``; the rest as is), and every rule and terminal is
renamed under a prefix so the grammar sits inside the tool grammar.  Decoding the string gives
back text the original grammar accepts.

Supported: rules and terminals, string literals, ``/regex/`` literals (Python syntax: literals,
classes, ``.``, ``\\d \\w \\s``, groups, alternation, repetition), ``|``, ``?``, ``*``, ``+``,
``[...]``, ``( )``, repeats (``x{n}``, ``x{m,n}``, ``x{m,}``, ``x{,n}``, ``x ~ n``, ``x ~ m..n``),
priorities.  Refused with the construct named (the caller's 400): ``%`` directives
(``%import``, ``%ignore``: an ignored terminal would apply to the whole tool grammar),
case-insensitive strings, regex flags and anchors, ``"a".."z"`` ranges, templates
(``_sep{x, ","}``), special tokens and grammar references.
"""

from __future__ import annotations

import json
import re
from re import _constants as sre_c  # type: ignore[attr-defined]  # the regex parser re uses
from re import _parser as sre_parse  # type: ignore[attr-defined]

MAX_CHAR = 0x10FFFF
# What JSON escapes: control characters, the quote, the backslash (as json.dumps writes them).
SPECIAL = [*range(0x20), 0x22, 0x5C]
_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r\n]+) | (?P<comment>//[^\n]*) | (?P<string>"(?:[^"\\\n]|\\.)*"(?P<sflags>[a-z]*))
  | (?P<regex>/(?!/)(?:[^/\\\n]|\\.)+/(?P<rflags>[a-z]*)) | (?P<name>[_a-zA-Z][_a-zA-Z0-9]*)
  | (?P<punct>->|\.\.|[:|()\[\]?*+~.,{}@<>%!=-]|[0-9]+)
""", re.VERBOSE)
# Repeats, written as the engine takes them and as OpenAI's Lark examples use them: x{n},
# x{m,n}, x{m,}, x{,n}; x ~ n, x ~ m..n.  (A brace holding a name is a template: refused.)
_REPEAT = re.compile(r"\{[ \t]*(?=[0-9,])([0-9]*)[ \t]*(?:(,)[ \t]*([0-9]*)[ \t]*)?\}"
                     r"|~[ \t]*([0-9]+)(?:[ \t]*\.\.[ \t]*([0-9]+))?")


class LarkInputError(ValueError):
    """The grammar uses something this rewrite does not support (the message names it).

    Its message is written here for the client (never an engine's or parser's text), so the
    HTTP layer may show it as it is: :attr:`reason`."""

    @property
    def reason(self) -> str:
        """The client-facing message."""
        return str(self.args[0]) if self.args else "unsupported grammar"


def json_string_rules(definition: str, prefix: str) -> tuple[str, str]:
    """(the start rule's new name, the rewritten rules): ``definition``'s language, JSON-escaped.
    Raise :class:`LarkInputError` for what is not supported (see the module docstring)."""
    out: list[str] = []
    defined: set[str] = set()
    pos = 0
    line_start = True
    while pos < len(definition):
        m = _TOKEN.match(definition, pos)
        repeat = _REPEAT.match(definition, pos)
        if repeat is not None and repeat.group() != "{,}":
            out.append(_repeat(repeat))
            pos, line_start = repeat.end(), False
            continue
        if m is None:
            raise LarkInputError(f"cannot read the grammar at {definition[pos:pos + 20]!r}")
        pos = m.end()
        kind, text = m.lastgroup, m.group()
        if kind in ("ws", "comment"):
            if "\n" in text or kind == "comment":
                line_start = True
                out.append("\n")
            else:
                out.append(" ")
            continue
        if kind == "sflags" or kind == "string":
            if m.group("sflags"):
                raise LarkInputError("case-insensitive strings (\"...\"i) are not supported")
            try:
                literal = json.loads(text)
            except ValueError:
                raise LarkInputError(f"cannot read the string {text}") from None
            out.append(json.dumps(_escaped(literal)))
        elif kind in ("regex", "rflags"):
            if m.group("rflags"):
                raise LarkInputError("regular expression flags (/.../i) are not supported")
            out.append("/" + escaped_regex(text[1:-1 - len(m.group("rflags"))]) + "/")
        elif kind == "name":
            renamed = (prefix.upper() if text[0].isupper() else prefix.lower()) + text
            if line_start:
                defined.add(text)
            out.append(renamed)
        else:
            if text in ("%", "..", "{", "}", "<", ">", "@"):
                what = {"%": "directives (%import, %ignore, ...)", "..": "character ranges (\"a\"..\"z\")",
                        "{": "templates", "}": "templates", "<": "special tokens", ">": "special tokens",
                        "@": "grammar references"}[text]
                raise LarkInputError(f"{what} are not supported in a custom tool's Lark grammar")
            out.append(text)
            if line_start and text in ("?", "!"):  # ?rule: / !rule: still define ``rule``
                continue
        line_start = False
    if "start" not in defined:
        raise LarkInputError("the grammar has no start rule")
    return prefix.lower() + "start", "".join(out)


def _repeat(m: re.Match[str]) -> str:
    """A repeat as the engine reads it (``{m,n}`` / ``~ m..n``), spaces dropped."""
    low, comma, high, times, upto = m.groups()
    if times is not None:
        return f" ~ {times}" + (f"..{upto}" if upto is not None else "")
    return "{" + low + ("," + high if comma else "") + "}"


def input_grammar(definition: str) -> str:
    """A whole Lark grammar accepting the JSON escaping of exactly the inputs ``definition``
    accepts (the string's content, without its quotes): what a call's decoded input is checked
    against, with the rules the tool grammar enforces it by."""
    start, rules = json_string_rules(definition, "input_")
    return f"start: {start}\n{rules}"


def escaped_input(text: str) -> str:
    """A decoded input written as the tool grammar has it (the JSON escaping the rewrite
    describes), to check it against :func:`input_grammar`."""
    return _escaped(text)


def _escaped(text: str) -> str:
    """``text`` as it is written inside a JSON string."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


# -- regular expressions ----------------------------------------------------------------------

def escaped_regex(pattern: str) -> str:
    """A regex matching the JSON escaping of exactly the strings ``pattern`` matches."""
    try:
        parsed = sre_parse.parse(pattern)
    except re.error as exc:
        # re.error's msg and pos describe the caller's own pattern ("missing ), unterminated
        # subpattern", an index into it): actionable, and no internals.
        where = f" at position {exc.pos}" if exc.pos is not None else ""
        raise LarkInputError(f"cannot read the regular expression /{pattern}/: "
                             + exc.msg + where) from None
    if parsed.state.flags & ~(sre_c.SRE_FLAG_UNICODE):
        raise LarkInputError("regular expression flags are not supported")
    return _seq(parsed)


def _seq(items: object) -> str:
    return "".join(_item(op, av) for op, av in items)  # type: ignore[attr-defined]


def _item(op: object, av: object) -> str:
    if op is sre_c.LITERAL:
        return _chars([(av, av)])  # type: ignore[list-item]
    if op is sre_c.NOT_LITERAL:
        return _chars(_complement([(av, av)]))  # type: ignore[list-item]
    if op is sre_c.ANY:
        return _chars(_complement([(0x0A, 0x0A)]))
    if op is sre_c.IN:
        return _chars(_class(av))  # type: ignore[arg-type]
    if op is sre_c.BRANCH:
        return "(?:" + "|".join(_seq(b) for b in av[1]) + ")"  # type: ignore[index]
    if op is sre_c.SUBPATTERN:
        return "(?:" + _seq(av[-1]) + ")"  # type: ignore[index]
    if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, getattr(sre_c, "POSSESSIVE_REPEAT", None)):
        lo, hi, sub = av  # type: ignore[misc]
        body = "(?:" + _seq(sub) + ")"
        if hi is sre_c.MAXREPEAT:
            return body + ("*" if lo == 0 else "+" if lo == 1 else f"{{{lo},}}")
        return body + f"{{{lo},{hi}}}"
    raise LarkInputError(f"the regular expression construct {str(op).lower()} is not supported")


CATEGORIES = {
    sre_c.CATEGORY_DIGIT: [(0x30, 0x39)],
    sre_c.CATEGORY_SPACE: [(0x09, 0x0D), (0x20, 0x20)],
    sre_c.CATEGORY_WORD: [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
}
NEGATED = {sre_c.CATEGORY_NOT_DIGIT: sre_c.CATEGORY_DIGIT, sre_c.CATEGORY_NOT_SPACE: sre_c.CATEGORY_SPACE,
           sre_c.CATEGORY_NOT_WORD: sre_c.CATEGORY_WORD}


def _class(items: list[tuple[object, object]]) -> list[tuple[int, int]]:
    """The code point ranges a ``[...]`` class matches (ASCII meanings of \\d \\w \\s)."""
    ranges: list[tuple[int, int]] = []
    negate = False
    for op, av in items:
        if op is sre_c.NEGATE:
            negate = True
        elif op is sre_c.LITERAL:
            ranges.append((av, av))  # type: ignore[arg-type]
        elif op is sre_c.RANGE:
            ranges.append(av)  # type: ignore[arg-type]
        elif op is sre_c.CATEGORY and av in CATEGORIES:
            ranges.extend(CATEGORIES[av])  # type: ignore[index]
        elif op is sre_c.CATEGORY and av in NEGATED:
            ranges.extend(_complement(CATEGORIES[NEGATED[av]]))  # type: ignore[index]
        else:
            raise LarkInputError(f"the class item {str(op).lower()} is not supported")
    ranges = _merge(ranges)
    return _complement(ranges) if negate else ranges


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return merged


def _complement(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, at = [], 0
    for lo, hi in _merge(ranges):
        if lo > at:
            out.append((at, lo - 1))
        at = hi + 1
    if at <= MAX_CHAR:
        out.append((at, MAX_CHAR))
    return out


def _chars(ranges: list[tuple[int, int]]) -> str:
    """A regex for one character of ``ranges``, written as JSON writes it."""
    special = set(SPECIAL)
    plain = _merge([r for lo, hi in ranges for r in _minus(lo, hi, special)])
    escapes = sorted({c for lo, hi in ranges for c in special if lo <= c <= hi})
    parts = [re.escape(_escaped(chr(c))) for c in escapes]
    if plain:
        parts.insert(0, "[" + "".join(_range(lo, hi) for lo, hi in plain) + "]")
    if not parts:
        raise LarkInputError("the regular expression has a class that matches nothing")
    return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"


def _minus(lo: int, hi: int, special: set[int]) -> list[tuple[int, int]]:
    out, start = [], lo
    for c in range(lo, min(hi, 0x5C) + 1):
        if c in special:
            if c > start:
                out.append((start, c - 1))
            start = c + 1
    if start <= hi:
        out.append((start, hi))
    return out


def _range(lo: int, hi: int) -> str:
    def one(c: int) -> str:
        return f"\\x{{{c:x}}}" if c < 0x21 or c > 0x7E or chr(c) in "\\]^-[" else chr(c)
    return one(lo) if lo == hi else f"{one(lo)}-{one(hi)}"
