"""The forced-run budget of :mod:`.literal_budget`, for grammar texts (Lark, and the GBNF / EBNF
and ``choice`` lists that become Lark).

A grammar can force a long run of text the same ways a schema can, and more: a long literal
(``start: "aaaa…"``), a repeated literal or group (``start: "a"{1000000}``,
``("a" "b"){300000}``, GBNF ``root ::= "a"{1000000}``), a terminal or regex that repeats one
character (``A: "a"{1000000}``, ``/a{1000000}/``), a chain of rules each forcing a piece, or a
``%json{...}`` schema with a long ``pattern`` / ``const``.  llguidance compiles all of them in
milliseconds, then fails at the first token: a run forced at the parser level exhausts its
Earley item budget (``Too many items (limit 50000; ff_tokens)``: measured on the embedded
tokenizer, ``"a"{20000}`` runs, ``"a"{40000}`` fails), one forced inside a lexeme its lexer
budget (``A: "a"{150000}`` runs at ~0.5 s a step, ``"a"{1000000}`` fails).  Runs that leave a
choice at each step (``x{1000000}`` with ``x: "a" | "b"``, ``"a"{0,1000000}``,
``/[ab]{1000000}/``) cost microseconds a step and are not limited.

So the grammar text is read here, before the engine sees it, and the longest run it can force
is measured with the same algebra as a schema's patterns; one over
:data:`~.literal_budget.MAX_FORCED_RUN` bytes is a :class:`~afm_struct.errors.GrammarLimitError`
naming the rule.  Syntax this reader does not follow (templates, llguidance extensions it does
not know) is left to the engine, whose budget hits during decoding are reported as
``grammar_too_complex`` too.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import NamedTuple

from ...errors import GrammarLimitError
from .literal_budget import (
    _CHOICE,
    MAX_FORCED_RUN,
    MAX_PATTERN_CHARS,
    _repeat,
    _Run,
    _sequence,
    forced_run,
    longest_forced_run,
    regex_run,
)

# The deepest chain of rule references a grammar may have.  llguidance builds grammars
# recursively on the compiling thread's stack, and a deep chain overflows it, killing the
# process (measured on an 8 MB stack: ``r0: ("a" r1)?`` / ``r1: ("a" r2)?`` / ... crashes at
# 2,000 rules and runs at 1,500; ``r0: "a" r1`` / ... crashes between 2,500 and 3,000).  Real
# grammars chain a few dozen.  Every thread gets a stack of at least 16 MB
# (afm_struct/models/thread_stack.py): macOS gives other threads 512 KB, where 450 rules crash.
MAX_RULE_DEPTH = 500
# The longest grammar text read at all (the reader below is pure Python: a 1 MB grammar holds
# the GIL every running stream needs for over a second; llama.cpp's grammars/ are under 4 KB).
MAX_GRAMMAR_CHARS = 65_536

_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r]+|//[^\n]*|\#[^\n]*)
  | (?P<nl>\n)
  | (?P<string>"(?:[^"\\\n]|\\.)*"i?)
  | (?P<regex>/(?!/)(?:[^/\\\n]|\\.)+/[imslux]*)
  | (?P<special><[^<>\s]*>)
  | (?P<directive>%[a-z]+)
  | (?P<range>\{\s*\d+\s*(?:,\s*\d*\s*)?\})
  | (?P<tilde>~\s*\d+(?:\s*\.\.\s*\d+)?)
  | (?P<name>[?!]?[A-Za-z_][A-Za-z0-9_]*)
  | (?P<prio>\.-?\d+)
  | (?P<dots>\.\.)
  | (?P<dot>\.)
  | (?P<punct>[:|()\[\]?*+])
""", re.VERBOSE)


class _Unread(Exception):
    """Syntax this reader does not follow: the grammar is left to the engine."""


class _Tok(NamedTuple):
    kind: str
    text: str
    at: int


def _tokens(text: str) -> list[_Tok]:
    out: list[_Tok] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            if text[pos] == "{" and out and out[-1].kind == "directive":
                # %json{...} / %regex{...}: a JSON object up to its matching brace.
                try:
                    _, end = json.JSONDecoder().raw_decode(text, pos)
                except ValueError as exc:
                    raise _Unread from exc
                out.append(_Tok("object", text[pos:end], pos))
                pos = end
                continue
            raise _Unread
        kind = m.lastgroup or ""
        if kind != "ws":
            out.append(_Tok(kind, m.group(), pos))
        pos = m.end()
    return out


def _rules(tokens: list[_Tok]) -> dict[str, list[_Tok]]:
    """Each rule's or terminal's body, by name (``%ignore`` / ``%import`` lines dropped)."""
    rules: dict[str, list[_Tok]] = {}
    body: list[_Tok] | None = None
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t.kind == "directive" and t.text in ("%ignore", "%import", "%llguidance", "%declare"):
            while i < len(tokens) and tokens[i].kind != "nl":
                i += 1
            body = None
            continue
        if t.kind == "name" and (i == 0 or tokens[i - 1].kind == "nl"):
            j = i + 1
            if j < len(tokens) and tokens[j].kind == "prio":
                j += 1
            if j < len(tokens) and tokens[j].text == ":":
                body = rules.setdefault(t.text.lstrip("?!"), [])
                i = j + 1
                continue
        if t.kind != "nl":
            if body is None:
                raise _Unread
            body.append(t)
        i += 1
    return rules


def _literal(token: str) -> _Run:
    if token.endswith("i"):
        return _CHOICE  # case-insensitive: a choice at each letter
    try:
        value = json.loads(token)
    except ValueError:
        value = token[1:-1]
    n = len(value.encode("utf-8", "surrogatepass"))
    return _Run(True, n, n, n)


def _order(rules: dict[str, list[_Tok]]) -> tuple[list[str], tuple[int, str]]:
    """The rules, each after those it refers to (a depth-first post-order, cycles cut), and the
    deepest chain of references: its length and the rule it starts at.  Iterative: a grammar may
    chain thousands of rules."""
    refs = {name: [t.text for t in body if t.kind == "name" and t.text in rules and t.text != name]
            for name, body in rules.items()}
    order: list[str] = []
    depth: dict[str, int] = {}
    on_stack: set[str] = set()
    for root in rules:
        if root in depth:
            continue
        stack = [(root, iter(refs[root]))]
        on_stack.add(root)
        while stack:
            name, children = stack[-1]
            child = next((c for c in children if c not in depth and c not in on_stack), None)
            if child is not None:
                on_stack.add(child)
                stack.append((child, iter(refs[child])))
                continue
            stack.pop()
            on_stack.discard(name)
            depth[name] = 1 + max((depth[c] for c in refs[name] if c in depth), default=0)
            order.append(name)
    deepest = max(rules, key=lambda n: depth[n], default="")
    return order, (depth.get(deepest, 0), deepest)


def rule_depth(text: str) -> tuple[int, str] | None:
    """The deepest chain of rule references in the Lark grammar ``text`` (``a: "x" b``,
    ``b: "x" c``, ...: 3 from ``a``) and the rule it starts at; None when this reader cannot
    follow the grammar's syntax."""
    measure = measure_grammar(text)
    return None if measure is None else (measure.depth, measure.deepest)


class _Reader:
    def __init__(self, rules: dict[str, list[_Tok]]) -> None:
        self.rules = rules
        self.done: dict[str, _Run] = {}
        self.worst: tuple[int, str] = (0, "")

    def rule(self, name: str) -> _Run:
        # Rules are read in :func:`_order`: a reference not read yet closes a cycle, which
        # ends in a choice; unknown names are imports.
        return self.done.get(name, _CHOICE)

    def read(self, name: str) -> None:
        body = self.rules[name]
        run, end = self.alternatives(body, 0)
        if end != len(body):
            raise _Unread
        self.done[name] = run
        if run.best > self.worst[0]:
            self.worst = (run.best, name)

    def alternatives(self, toks: list[_Tok], i: int) -> tuple[_Run, int]:
        runs = []
        while True:
            run, i = self.sequence(toks, i)
            runs.append(run)
            if i < len(toks) and toks[i].text == "|":
                i += 1
                continue
            break
        if len(runs) == 1:
            return runs[0], i
        return _Run(False, min(r.pre for r in runs), max(r.suf for r in runs), max(r.best for r in runs)), i

    def sequence(self, toks: list[_Tok], i: int) -> tuple[_Run, int]:
        parts = []
        while i < len(toks) and toks[i].text not in ("|", ")", "]"):
            run, i = self.item(toks, i)
            parts.append(run)
        return _sequence(parts), i

    def item(self, toks: list[_Tok], i: int) -> tuple[_Run, int]:
        run, i = self.atom(toks, i)
        while i < len(toks):
            t = toks[i]
            if t.text == "?":
                run = _repeat(run, 0, 1)
            elif t.text == "*":
                run = _repeat(run, 0, None)
            elif t.text == "+":
                run = _repeat(run, 1, None)
            elif t.kind in ("range", "tilde"):
                nums = [int(n) for n in re.findall(r"\d+", t.text)]
                open_ended = t.kind == "range" and re.search(r",\s*\}", t.text) is not None
                run = _repeat(run, nums[0], None if open_ended else nums[-1])
            else:
                break
            i += 1
        return run, i

    def atom(self, toks: list[_Tok], i: int) -> tuple[_Run, int]:
        t = toks[i]
        if t.kind == "string":
            if i + 2 < len(toks) and toks[i + 1].kind == "dots":
                return _CHOICE, i + 3  # "a".."z"
            return _literal(t.text), i + 1
        if t.kind == "regex":
            body, _, flags = t.text[1:].rpartition("/")
            return (_CHOICE if "i" in flags else regex_run(body, engine_syntax=True)), i + 1
        if t.kind == "name":
            return self.rule(t.text), i + 1
        if t.kind == "special":
            return _CHOICE, i + 1
        if t.kind == "directive" and i + 1 < len(toks) and toks[i + 1].kind == "object":
            if t.text == "%json":
                found = longest_forced_run(json.loads(toks[i + 1].text), engine_syntax=True)
                if found is not None:
                    raise _Over(found.length, f"%json schema ({found.what})")
            return _CHOICE, i + 2
        if t.text in ("(", "["):
            run, j = self.alternatives(toks, i + 1)
            close = ")" if t.text == "(" else "]"
            if j >= len(toks) or toks[j].text != close:
                raise _Unread
            return (run if close == ")" else _repeat(run, 0, 1)), j + 1
        raise _Unread


class _Over(Exception):
    def __init__(self, length: int, where: str) -> None:
        super().__init__(where)
        self.length = length
        self.where = where


@dataclass(frozen=True)
class GrammarMeasure:
    """What a grammar asks of the engine's budgets: its deepest chain of rule references
    (``depth``, from rule ``deepest``) and its longest forced run (``run`` bytes, in ``part``:
    a rule's name or a ``%json`` schema; 0 and "" when nothing is forced or, over the depth
    limit, the rules were not read)."""

    depth: int
    deepest: str
    run: int
    part: str


def measure_grammar(text: str) -> GrammarMeasure | None:
    """:class:`GrammarMeasure` of the Lark grammar ``text``; None when this reader cannot
    follow its syntax (the engine then judges it alone)."""
    try:
        rules = _rules(_tokens(text))
        order, (depth, deepest) = _order(rules)
    except (_Unread, IndexError, ValueError):
        return None
    if depth > MAX_RULE_DEPTH:  # refused for that: the runs need not be read
        return GrammarMeasure(depth, deepest, 0, "")
    reader = _Reader(rules)
    try:
        for name in order:
            reader.read(name)
    except _Over as over:
        return GrammarMeasure(depth, deepest, over.length, over.where)
    except (_Unread, RecursionError, IndexError, ValueError):
        return None  # its depth is within the limit: the rest is the engine's to judge
    return GrammarMeasure(depth, deepest, *reader.worst)


def grammar_forced_run(text: str) -> tuple[int, str] | None:
    """The longest run of bytes the Lark grammar ``text`` can force and the rule (or part)
    forcing it; None when this reader cannot follow the grammar's syntax."""
    measure = measure_grammar(text)
    return None if measure is None else (measure.run, measure.part)


def check_grammar_size(text: str, *, param: str = "grammar") -> None:
    """Raise :class:`GrammarLimitError` at ``param`` when a grammar text (Lark, GBNF, EBNF, a
    choice list written as one) is longer than :data:`MAX_GRAMMAR_CHARS`: checked before any
    conversion or reading."""
    if len(text) > MAX_GRAMMAR_CHARS:
        raise GrammarLimitError(
            f"the grammar at $.{param} is {len(text):,} characters long; constrained output takes "
            f"grammars of at most {MAX_GRAMMAR_CHARS:,} (a longer one costs seconds of compile "
            "work shared with every running request): factor repeated parts into rules", param=param)


def check_grammar_budgets(text: str, *, param: str = "grammar") -> None:
    """Raise :class:`GrammarLimitError` (``param``: where the grammar sits) when the Lark
    grammar ``text`` chains rules deeper than :data:`MAX_RULE_DEPTH` or forces a run over
    :data:`~.literal_budget.MAX_FORCED_RUN` bytes, or is longer than :data:`MAX_GRAMMAR_CHARS`."""
    check_grammar_size(text, param=param)
    measure = measure_grammar(text)
    if measure is None:
        return
    if measure.depth > MAX_RULE_DEPTH:
        raise GrammarLimitError(
            f"the grammar at $.{param} chains {measure.depth:,} rules deep (from rule "
            f"{measure.deepest!r}, each referring to the next); the grammar engine allows at most "
            f"{MAX_RULE_DEPTH:,}: write the repetition as a repeat (x{{n}}, x*, x+) instead of one "
            "rule per step", param=param)
    if measure.run <= MAX_FORCED_RUN:
        return
    length, where = measure.run, measure.part
    part = where if where.startswith("%json") else f"rule {where!r}"
    raise GrammarLimitError(
        f"the grammar at $.{param} forces {length:,} characters in a row ({part}); constrained "
        f"output allows at most {MAX_FORCED_RUN:,} (a longer run exhausts the grammar engine's "
        "budgets at the first token): shorten the literal or lower the repeat count, or repeat "
        "a choice (e.g. /[a-z]{1,n}/ or (\"a\" | \"b\"){n}) instead of one fixed string",
        param=param)


def check_regex_budget(pattern: str, *, param: str) -> None:
    """Raise :class:`GrammarLimitError` at ``param`` when the regex ``pattern`` (a grammar text
    of its own, e.g. a custom tool's ``format.definition``) forces a run over the budget, or is
    longer than :data:`~.literal_budget.MAX_PATTERN_CHARS`."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise GrammarLimitError(
            f"the pattern at $.{param} is {len(pattern):,} characters long; constrained output "
            f"takes regular expressions of at most {MAX_PATTERN_CHARS:,} (a longer one costs "
            "seconds of compile work shared with every running request): shorten it", param=param)
    length = forced_run(pattern, engine_syntax=True)
    if length > MAX_FORCED_RUN:
        raise GrammarLimitError(
            f"the pattern at $.{param} forces {length:,} characters in a row; constrained output "
            f"allows at most {MAX_FORCED_RUN:,} (a longer run exhausts the grammar engine's lexer "
            "budget): shorten it, or repeat a class ([a-z]{1,n}) instead of one character",
            param=param)
