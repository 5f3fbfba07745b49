"""A JSON Schema ``pattern`` as the regular language of the strings it matches.

jsonschema judges ``pattern`` with Python's ``re.search``, so the pattern is read with Python's
own parser (``re._parser``) and Python's meanings: ``\\d`` / ``\\w`` / ``\\s`` are the Unicode
classes ``str.isdecimal`` / ``str.isalnum`` + ``_`` / ``str.isspace`` pick out, ``.`` is
anything but a newline, ``$`` matches at the end or before a final newline, and ``^`` / ``$``
may sit anywhere (``(a|$)`` inside a loop).  A lookahead right after a leading ``^``
(``^(?!@@)[\\w@]+$``) is an intersection with (the complement of) another language.  What is
not regular or not modelled here (backreferences, other lookarounds, ``\\b``, case folding,
multi-line mode) gives None: the caller leaves the pattern alone.
"""

from __future__ import annotations

import functools
import re
import re._constants as sre
import re._parser as sre_parse
import warnings
from typing import Any

from .regular import ANYTHING, FULL, Lang, Node, complement, length, normalize, one_of

_MAX_REPEAT = 1000  # a counted repeat beyond this is left alone (automaton size)


class _Unsupported(Exception):
    pass


@functools.cache
def _category(name: str) -> tuple[tuple[int, int], ...]:
    """Python's ``\\d``, ``\\w``, ``\\s`` for str patterns, as code point intervals (built once)."""
    test = {"digit": str.isdecimal, "word": lambda c: c.isalnum() or c == "_", "space": str.isspace}[name]
    out: list[tuple[int, int]] = []
    for cp in range(0x110000):
        if test(chr(cp)):
            if out and out[-1][1] == cp - 1:
                out[-1] = (out[-1][0], cp)
            else:
                out.append((cp, cp))
    return tuple(out)


_ASCII = {"digit": ((48, 57),), "word": ((48, 57), (65, 90), (95, 95), (97, 122)),
          "space": ((9, 13), (32, 32))}
_CATEGORIES = {
    sre.CATEGORY_DIGIT: ("digit", False), sre.CATEGORY_NOT_DIGIT: ("digit", True),
    sre.CATEGORY_WORD: ("word", False), sre.CATEGORY_NOT_WORD: ("word", True),
    sre.CATEGORY_SPACE: ("space", False), sre.CATEGORY_NOT_SPACE: ("space", True),
}
_ANY_BUT_NEWLINE = ((0, 9), (11, 0x10FFFF))


def parse_python(pattern: str) -> Any | None:
    """Python's parse tree of ``pattern`` (None if Python rejects it), without the
    ``FutureWarning`` some user patterns draw (``[[`` "possible nested set")."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        try:
            return sre_parse.parse(pattern)
        except (re.error, RecursionError, OverflowError):
            return None


def pattern_language(pattern: str) -> Lang | None:
    """The strings ``re.search(pattern, s)`` matches, or None when not modelled."""
    parsed = parse_python(pattern)
    if parsed is None:
        return None
    flags = parsed.state.flags
    if flags & (sre.SRE_FLAG_IGNORECASE | sre.SRE_FLAG_MULTILINE | sre.SRE_FLAG_LOCALE):
        return None
    reader = _Reader(ascii=bool(flags & sre.SRE_FLAG_ASCII), dotall=bool(flags & sre.SRE_FLAG_DOTALL))
    try:
        return reader.search(list(parsed))
    except (_Unsupported, RecursionError):
        return None


class _Reader:
    def __init__(self, *, ascii: bool, dotall: bool) -> None:
        self.ascii = ascii
        self.dotall = dotall

    def search(self, items: list[Any]) -> Lang:
        """Top level: a lookahead right after a leading ``^`` in a branch becomes ``&``."""
        branches = [items]
        if len(items) == 1 and items[0][0] is sre.BRANCH:
            branches = [list(b) for b in items[0][1][1]]
        out: Lang | None = None
        for branch in branches:
            lang = self.branch(branch)
            out = lang if out is None else out | lang
        assert out is not None
        return out

    def branch(self, items: list[Any]) -> Lang:
        if not (len(items) >= 2 and items[0] == (sre.AT, sre.AT_BEGINNING)
                and items[1][0] in (sre.ASSERT, sre.ASSERT_NOT) and items[1][1][0] == 1):
            return Lang(("search", self.seq(items)))
        ahead = []
        i = 1
        while i < len(items) and items[i][0] in (sre.ASSERT, sre.ASSERT_NOT) and items[i][1][0] == 1:
            ahead.append(items[i])
            i += 1
        lang = self.branch([items[0], *items[i:]])
        for op, (_direction, sub) in ahead:
            looked = Lang(("search", ("cat", ("bol",), self.seq(list(sub)))))
            lang = lang & (looked if op is sre.ASSERT else ~looked)
        return lang

    def seq(self, items: list[Any]) -> Node:
        parts = [self.item(op, av) for op, av in items]
        return ("cat", *parts) if parts else ("eps",)

    def item(self, op: Any, av: Any) -> Node:
        if op is sre.LITERAL:
            return ("set", ((av, av),))
        if op is sre.NOT_LITERAL:
            return ("set", complement(((av, av),)))
        if op is sre.ANY:
            return ("set", FULL if self.dotall else _ANY_BUT_NEWLINE)
        if op is sre.IN:
            return ("set", self.charset(av))
        if op is sre.BRANCH:
            return ("alt", *(self.seq(list(b)) for b in av[1]))
        if op is sre.SUBPATTERN:
            _group, add, remove, sub = av
            if add or remove:
                raise _Unsupported("scoped flags")
            return self.seq(list(sub))
        if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
            lo, hi, sub = av
            if lo > _MAX_REPEAT or (hi is not sre.MAXREPEAT and hi > _MAX_REPEAT):
                raise _Unsupported("repeat")
            # Laziness and possessiveness change which match is found, not whether one is.
            return ("rep", self.seq(list(sub)), lo, None if hi is sre.MAXREPEAT else hi)
        if op is sre.ATOMIC_GROUP:
            raise _Unsupported("atomic group")  # (?>…) can make a match fail: not modelled
        if op is sre.AT:
            kind = {sre.AT_BEGINNING: "bol", sre.AT_BEGINNING_STRING: "bol", sre.AT_END: "eol",
                    sre.AT_END_STRING: "eos"}.get(av)
            if kind is None:
                raise _Unsupported("word boundary")
            return (kind,)
        raise _Unsupported(str(op))

    def charset(self, items: list[Any]) -> tuple[tuple[int, int], ...]:
        negate = False
        out: list[tuple[int, int]] = []
        for op, av in items:
            if op is sre.NEGATE:
                negate = True
            elif op is sre.LITERAL:
                out.append((av, av))
            elif op is sre.RANGE:
                out.append(av)
            elif op is sre.CATEGORY:
                name, inverted = _CATEGORIES[av] if av in _CATEGORIES else (None, False)
                if name is None:
                    raise _Unsupported("category")
                cls = _ASCII[name] if self.ascii else _category(name)
                out.extend(complement(cls) if inverted else cls)
            else:
                raise _Unsupported(str(op))
        result = normalize(out)
        return complement(result) if negate else result


def search(pattern: str, key: str) -> bool:
    """``re.search`` as jsonschema runs it (False for a pattern Python cannot compile)."""
    try:
        return re.search(pattern, key) is not None
    except re.error:
        return False


def string_language(schema: Any, resolve: Any, draft: int, depth: int = 0) -> Lang | None:
    """The strings ``schema`` accepts (its keywords for other kinds say nothing about strings),
    or None when it is not modelled.  ``resolve`` maps a ``$ref`` to its target (or None)."""
    from ..schema.drafts import asserting_keywords
    from ..schema.string_formats import rule_for

    if schema is True or schema == {}:
        return ANYTHING
    if schema is False:
        return Lang(("none",))
    if not isinstance(schema, dict) or depth > 8:
        return None
    known = asserting_keywords(draft)
    keys = {k for k in schema if k in known}
    ref = schema.get("$ref")
    parts: list[Lang] = []
    if isinstance(ref, str) and "$ref" in keys:
        target = resolve(ref)
        inner = None if target is None else string_language(target, resolve, draft, depth + 1)
        if inner is None:
            return None
        if draft in (3, 4, 6, 7):
            return inner
        parts.append(inner)
    t = schema.get("type") if "type" in keys else None
    if t is not None and "string" not in ([t] if isinstance(t, str) else t if isinstance(t, list) else []):
        return Lang(("none",))
    for key in keys - {"$ref", "type"}:
        value = schema[key]
        if key in ("enum", "const"):
            values = [value] if key == "const" else value if isinstance(value, list) else None
            if values is None:
                return None
            parts.append(one_of(v for v in values if isinstance(v, str)))
        elif key == "pattern":
            lang = pattern_language(value) if isinstance(value, str) else None
            if lang is None:
                return None
            parts.append(lang)
        elif key in ("minLength", "maxLength"):
            if not isinstance(value, int) or isinstance(value, bool):
                return None
            parts.append(length(value, None) if key == "minLength" else length(0, value))
        elif key == "format":
            if not isinstance(value, str) or rule_for(value, draft) is not None:
                return None
        elif key in ("allOf", "anyOf"):
            if not isinstance(value, list) or not value:
                return None
            subs = [string_language(v, resolve, draft, depth + 1) for v in value]
            if any(s is None for s in subs):
                return None
            joined = subs[0]
            for s in subs[1:]:
                joined = (joined & s) if key == "allOf" else (joined | s)  # type: ignore[operator]
            parts.append(joined)  # type: ignore[arg-type]
        elif key == "not":
            inner = string_language(value, resolve, draft, depth + 1)
            if inner is None:
                return None
            parts.append(~inner)
        elif key in _STRING_BLIND:
            continue
        else:
            return None
    out = ANYTHING
    for p in parts:
        out = out & p
    return out


# Keywords that never reject a string.
_STRING_BLIND = frozenset({
    "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum", "items", "prefixItems",
    "additionalItems", "contains", "minContains", "maxContains", "maxItems", "minItems", "uniqueItems",
    "maxProperties", "minProperties", "required", "properties", "patternProperties",
    "additionalProperties", "dependentRequired", "dependentSchemas", "dependencies", "propertyNames",
    "unevaluatedProperties", "unevaluatedItems", "contentEncoding", "contentMediaType", "contentSchema"})
