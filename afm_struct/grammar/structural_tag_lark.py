"""A structural tag's format tree (:mod:`.structural_tag`) written as one llguidance Lark grammar.

Free text is where the grammar engine needs care: a greedy ``/(.|\\n)*/`` never ends, so free
text is written as llguidance's lazy lexemes, which stop at the first occurrence of what ends
them (docs/syntax.md "Lazy lexemes" and "Tool calling" in llguidance):

* a trigger: ``t[lazy]: TEXT "<fn="``, then one of the tags that begin with it;
* the fixed string that must follow (a tag's ``end``, the next element's first string):
  ``a[suffix="</fn>"]: TEXT``, the string taken with the text.

So each node is written knowing what follows it (:class:`Follow`): the end of the output, a
fixed string (the node's expression then includes it), or something else, which free text
cannot end at (a 400 naming the node).  JSON bodies are ``%json {...}``, their text given by
the caller (the compile chooses each body's schema and options: structural_tag_compile.py).

A string that starts with a special token's text (``<|python_tag|>`` in Llama 3.1) is written
with that token itself (``<[id]>``), as vLLM and llguidance's ``StructTag`` read such markup: the
model writes the special token, not its spelling.  Free text before one needs no lazy lexeme
(a special token is outside the text's bytes): ``TEXT <[id]>``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from ..errors import InvalidRequestError
from .structural_tag import (
    AnyText,
    Const,
    Format,
    JsonBody,
    Or,
    Regex,
    Sequence,
    Tag,
    TagsWithSeparator,
    TriggeredTags,
)

TEXT = "ST_TEXT"


@dataclass(frozen=True)
class Follow:
    """What comes right after a node: ``text`` (a non-empty fixed string), the end of the
    output (``end``), or neither (something that starts with no fixed string)."""

    text: str = ""
    end: bool = False


END = Follow(end=True)
OPEN = Follow()


class Specials(Protocol):
    """The special tokens of the tokenizer the grammar is for (``prefix_of``: the one a text
    starts with, as (id, its text))."""

    def prefix_of(self, text: str) -> tuple[int, str] | None: ...


class NoSpecials:
    """No special tokens: every string is text."""

    def prefix_of(self, text: str) -> tuple[int, str] | None:
        return None


def lit(text: str) -> str:
    """A Lark string literal (JSON escapes, as llguidance reads them)."""
    return json.dumps(text)


def regex_literal(pattern: str) -> str:
    """``pattern`` as a Lark ``/.../`` regex: each unescaped ``/`` escaped."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            out.append(pattern[i:i + 2])
            i += 2
            continue
        out.append("\\/" if c == "/" else "\\n" if c == "\n" else c)
        i += 1
    return "/" + "".join(out) + "/"


def lead(node: Format) -> str:
    """The fixed string every match of ``node`` starts with ('' when none is known)."""
    if isinstance(node, Const):
        return node.value
    if isinstance(node, Tag):
        return node.begin
    if isinstance(node, Sequence):
        return lead(node.elements[0])
    return ""


def strip_lead(node: Format, prefix: str) -> Format:
    """``node`` without its first ``prefix`` characters (taken by the node before it)."""
    if isinstance(node, Const):
        return replace(node, value=node.value[len(prefix):])
    if isinstance(node, Tag):
        return replace(node, begin=node.begin[len(prefix):])
    assert isinstance(node, Sequence)
    return replace(node, elements=(strip_lead(node.elements[0], prefix), *node.elements[1:]))


def _needs_end(node: Format, what: str) -> InvalidRequestError:
    return InvalidRequestError(
        f"{node.where}: {what} must be followed by a fixed string (a const_string, a tag, the end of "
        "its tag) or by the end of the output: free text has nothing else to end at",
        param=node.where, code="invalid_value")


class _Writer:
    """One grammar's rules, named ``st_<n>``."""

    def __init__(self, body: Callable[[JsonBody], str], specials: Specials) -> None:
        self.body = body
        self.specials = specials
        self.rules: list[str] = []

    def lit(self, text: str) -> str:
        """``text`` as Lark: special tokens it starts with (and after each) as the tokens."""
        parts = []
        while text:
            found = self.specials.prefix_of(text)
            if found is None:
                parts.append(lit(text))
                break
            parts.append(f"<[{found[0]}]>")
            text = text[len(found[1]):]
        return " ".join(parts) or '""'

    def special(self, text: str) -> bool:
        return self.specials.prefix_of(text) is not None

    def rule(self, expr: str, attrs: str = "") -> str:
        name = f"st_{len(self.rules)}"
        self.rules.append(f"{name}{attrs}: {expr}")
        return name

    def text_until(self, follow: Follow) -> str:
        """Free text up to ``follow`` (taken with it), or to the end of the output."""
        if follow.end:
            return TEXT
        if self.special(follow.text):
            return f"{TEXT} {self.lit(follow.text)}"
        return self.rule(TEXT, f"[suffix={lit(follow.text)}]")

    def tail(self, follow: Follow) -> str:
        return f" {self.lit(follow.text)}" if follow.text else ""

    def emit(self, node: Format, follow: Follow) -> str:
        """``node``'s expression; it includes ``follow.text`` when there is one."""
        if isinstance(node, Const):
            written = (self.lit(node.value) if node.value else "") + self.tail(follow)
            return written.strip() or '""'
        if isinstance(node, Regex):
            return regex_literal(node.pattern) + self.tail(follow)
        if isinstance(node, JsonBody):
            return f"%json {self.body(node)}" + self.tail(follow)
        if isinstance(node, AnyText):
            if not (follow.end or follow.text):
                raise _needs_end(node, "any_text")
            return self.text_until(follow)
        if isinstance(node, Sequence):
            return self.sequence(node, follow)
        if isinstance(node, Or):
            return "(" + " | ".join(self.emit(e, follow) for e in node.elements) + ")"
        if isinstance(node, Tag):
            begin = f"{self.lit(node.begin)} " if node.begin else ""
            if node.end:
                return begin + self.emit(node.content, Follow(node.end)) + self.tail(follow)
            return begin + self.emit(node.content, follow)
        if isinstance(node, TriggeredTags):
            return self.triggered(node, follow)
        return self.separated(node, follow)

    def sequence(self, node: Sequence, follow: Follow) -> str:
        parts: list[str] = []
        taken = ""  # the next element's first string, already taken by the one before it
        for k, element in enumerate(node.elements):
            if taken:
                element = strip_lead(element, taken)
            if k == len(node.elements) - 1:
                parts.append(self.emit(element, follow))
                break
            taken = lead(node.elements[k + 1])
            parts.append(self.emit(element, Follow(taken) if taken else OPEN))
        return "(" + " ".join(p for p in parts if p != '""') + ")" if any(p != '""' for p in parts) else '""'

    def tag_choices(self, tags: tuple[Tag, ...], prefix: str = "") -> str:
        """One of ``tags`` (each begin without ``prefix``); each writes its own end."""
        return "(" + " | ".join(self.emit(strip_lead(t, prefix), OPEN) for t in tags) + ")"

    def triggered(self, node: TriggeredTags, follow: Follow) -> str:
        if not (follow.end or follow.text):
            raise _needs_end(node, "triggered_tags (free text)")
        segments = []
        for trigger in node.triggers:
            tags = tuple(t for t in node.tags if t.begin.startswith(trigger))
            if not tags:
                continue  # a trigger no tag starts with: free text may hold it (as in xgrammar)
            if self.special(trigger):  # the text ends at the token itself
                segments.append(f"{TEXT} {self.lit(trigger)} {self.tag_choices(tags, trigger)}")
                continue
            head = self.rule(f"{TEXT} {lit(trigger)}", "[lazy]")
            segments.append(f"{head} {self.tag_choices(tags, trigger)}")
        seg = self.rule(" | ".join(segments))
        if node.stop_after_first:
            first = seg + self.tail(follow)
            return first if node.at_least_one else f"({first} | {self.text_until(follow)})"
        return f"{seg}{'+' if node.at_least_one else '*'} {self.text_until(follow)}"

    def separated(self, node: TagsWithSeparator, follow: Follow) -> str:
        one = self.rule(self.tag_choices(node.tags))
        if node.stop_after_first:
            body = one if node.at_least_one else f"{one}?"
        else:
            more = f"({self.lit(node.separator)} {one})*" if node.separator else f"{one}*"
            body = f"{one} {more}" if node.at_least_one else f"({one} {more})?"
        return f"({body}){self.tail(follow)}"


def structural_tag_lark(tree: Format, body: Callable[[JsonBody], str],
                        specials: Specials | None = None) -> str:
    """The Lark grammar of ``tree``; ``body(node)`` is the JSON text after a body's ``%json``;
    ``specials``: the tokenizer's special tokens (none: every string is text).  Raises a 400
    naming a free-text node with nothing to end at."""
    writer = _Writer(body, specials or NoSpecials())
    start = writer.emit(tree, END)
    return "\n".join([f"start: {start}", *writer.rules, f"{TEXT}: /(.|\\n)*/", ""])
