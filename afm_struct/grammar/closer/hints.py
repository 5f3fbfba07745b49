"""What the closing search learns from a grammar's text: its patterns and their characters.

The search (:mod:`afm_struct.grammar.closer.completion`) steps the matcher, which shows a state only
through its mask.  Inside a pattern that mask often hides where the string is: under
``"\\d{4}-\\d{2}"`` (unanchored, so any character may follow) the states after ``2022-0`` and
``2022-00`` allow the same tokens, and only one is a step closer to the end.  So the search also
reads the patterns (and formats) the grammar text mentions:

* :attr:`ClosingHints.chars`: the characters they treat apart from others (a literal ``@``),
  tried first where a whole class of characters (digits, letters) is allowed;
* :meth:`ClosingHints.completions`: for a string written so far, the shortest way to finish it
  under each pattern, from the pattern's own automaton (``interegular``).  The search keeps a
  completion only if the matcher takes it (so an inapplicable pattern costs nothing but a probe);
* :attr:`ClosingHints.terminators`: the literal texts that end a lazy free-text lexeme
  (Qwen3-Coder's raw string value runs to ``\n</parameter>\n``): in raw text every character is
  allowed, so the mask never shows that the tag ends the value; the search tries each where
  the matcher takes it.
"""

from __future__ import annotations

import json
import re
import threading
from collections import deque
from typing import Any

# Characters a format's strings need beyond letters and digits (see formats.py for the rules).
_FORMAT_CHARACTERS = {
    "email": "@.", "idn-email": "@.", "date": "-", "time": ":.Z+-", "date-time": "-:TZ.+",
    "duration": "PTYMWDHS", "uri": ":/", "iri": ":/", "uri-reference": ":/#", "iri-reference": ":/#",
    "hostname": ".-", "idn-hostname": ".-", "ipv4": ".", "ipv6": ":.", "uuid": "-",
    "json-pointer": "/~", "relative-json-pointer": "/#", "uri-template": "{}/",
}
_KEYWORD = re.compile(r'"(pattern|format)"\s*:\s*("(?:[^"\\]|\\.)*")')
# A Lark ``/regex/`` terminal, on a rule line (not inside an inline ``%json`` schema or a quoted
# literal, where a slash is just a character of a URL).
_LARK_REGEX = re.compile(r'(?m)^[^"%\n]*?/((?:[^/\\\n]|\\.)+)/')
# A lazy free-text lexeme ending at a literal (afm_struct.tools.lark_text.text_until): the literal.
_LAZY_END = re.compile(r'(?m)^\w+\[lazy\]:\s*/\(\.\|\\n\)(?:\*|\{\d*,\d*\})((?:[^/\\\n]|\\.)+)/')
# Patterns longer than this are not turned into automata (interegular is pure Python).
MAX_PATTERN = 400
MAX_PATTERNS = 32
# Nor patterns whose repetitions unroll to more positions than this (``^a{1000000}$``), or whose
# automaton has more states than this.
MAX_POSITIONS = 2000
MAX_STATES = 4000
# Characters a completion may use for a class edge, best first (JSON-safe, printable ASCII).
_SAFE = "0aA1_-.:@/" + "".join(chr(c) for c in range(33, 127) if chr(c) not in '"\\')


def _expanded_size(node: Any) -> int:
    """An upper bound on the positions of interegular's tree once repetitions are unrolled
    (``a{1000000}`` is a million): what its automaton's construction costs, before building it."""
    from interegular import patterns as p

    if isinstance(node, p.Pattern):
        return sum(_expanded_size(o) for o in node.options) + 1
    if isinstance(node, p._Concatenation):
        return sum(_expanded_size(part) for part in node.parts) + 1
    if isinstance(node, p._Repeated):
        count = node.max if node.max is not None and node.max != float("inf") else node.min + 1
        return _expanded_size(node.base) * max(int(count), 1) + 1
    return 1


_BUILD_LOCK = threading.Lock()


def _frozen(state: Any) -> Any:
    """A hashable form of an interegular construction state (sets, lists, tuples of them)."""
    if isinstance(state, (set, frozenset)):
        return frozenset(_frozen(x) for x in state)
    if isinstance(state, (list, tuple)):
        return tuple(_frozen(x) for x in state)
    if isinstance(state, dict):
        return frozenset((k, _frozen(v)) for k, v in state.items())
    return state


def _bounded_fsm(tree: Any) -> Any:
    """``tree.to_fsm()`` with at most :data:`MAX_STATES` states per construction step: the
    subset construction of a pattern such as ``(a|b)*a(a|b){20}`` has a million.  (interegular
    builds every automaton through ``fsm.crawl``, which is swapped for a bounded one meanwhile;
    nothing else in the process builds automata with it.)"""
    import interegular.fsm as fsm

    def crawl(alphabet: Any, initial: Any, final: Any, follow: Any) -> Any:
        states, index, finals, table, i = [initial], {_frozen(initial): 0}, set(), {}, 0
        while i < len(states):
            state = states[i]
            if final(state):
                finals.add(i)
            table[i] = {}
            for transition in alphabet.by_transition:
                try:
                    nxt = follow(state, transition)
                except fsm.OblivionError:
                    continue
                key = _frozen(nxt)
                j = index.get(key)
                if j is None:
                    if len(states) >= MAX_STATES:
                        raise ValueError("pattern automaton too large")
                    j = index[key] = len(states)
                    states.append(nxt)
                table[i][transition] = j
            i += 1
        return fsm.FSM(alphabet=alphabet, states=range(len(states)), initial=0, finals=finals, map=table,
                       __no_validation__=True)

    with _BUILD_LOCK:
        original, fsm.crawl = fsm.crawl, crawl
        try:
            return tree.to_fsm()
        finally:
            fsm.crawl = original


def _top_level_alternatives(pattern: str) -> list[str]:
    """``pattern`` split at its top-level ``|`` (not inside a group, a class or an escape)."""
    parts, depth, in_class, start, i = [], 0, False, 0, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            parts.append(pattern[start:i])
            start = i + 1
        i += 1
    return [*parts, pattern[start:]]


def search_form(pattern: str) -> str:
    """A full-match regex for JSON Schema's ``pattern`` (a search: each top-level alternative is
    anchored only where it says ``^`` / ``$``), without anchors, which interegular lacks."""
    forms = []
    for alt in _top_level_alternatives(pattern):
        body = alt[1:] if alt.startswith("^") else ".*" + alt
        body = body[:-1] if body.endswith("$") and not body.endswith("\\$") else body + ".*"
        forms.append(body)
    return forms[0] if len(forms) == 1 else "|".join(f"(?:{f})" for f in forms)


class _Automaton:
    """A pattern's DFA (JSON Schema semantics: a search unless anchored) with memoized
    shortest completions per state."""

    def __init__(self, pattern: str) -> None:
        import interegular

        tree = interegular.parse_pattern(search_form(pattern))
        if _expanded_size(tree) > MAX_POSITIONS:
            raise ValueError("pattern too large to unroll")
        self.fsm = _bounded_fsm(tree)
        alphabet = self.fsm.alphabet
        explicit = {c for chars in alphabet.by_transition.values() for c in chars if isinstance(c, str)}
        # Characters the pattern treats apart from most others (a literal ``@``, the ``T`` of a
        # date-time): the ones an escape must try besides one member per class.
        self.distinct = frozenset(c for chars in alphabet.by_transition.values() if len(chars) <= 4
                                  for c in chars if isinstance(c, str))
        self.rep: dict[Any, str] = {}
        for symbol, chars in alphabet.by_transition.items():
            options = [c for c in chars if isinstance(c, str)]
            if len(options) < len(chars):  # ``anything_else``: a character no class names
                options += [c for c in _SAFE if c not in explicit]
            safe = [c for c in _SAFE if c in options]
            if safe:
                self.rep[symbol] = safe[0]
        self._memo: dict[Any, str | None] = {}
        self.lock = threading.Lock()  # automata are shared by every grammar with the pattern

    def state_after(self, value: str) -> Any:
        state = self.fsm.initial
        for c in value:
            state = self.fsm.map.get(state, {}).get(self.fsm.alphabet[c])
            if state is None:
                return None
        return state

    def shortest(self, state: Any) -> str | None:
        """The shortest string leading from ``state`` to a final state (breadth-first)."""
        if state in self._memo:
            return self._memo[state]
        parents: dict[Any, tuple[Any, str] | None] = {state: None}
        queue = deque([state])
        end = None
        while queue:
            s = queue.popleft()
            if s in self.fsm.finals:
                end = s
                break
            for symbol, nxt in self.fsm.map.get(s, {}).items():
                if nxt not in parents and symbol in self.rep:
                    parents[nxt] = (s, self.rep[symbol])
                    queue.append(nxt)
        out = None
        if end is not None:
            chars = []
            while parents[end] is not None:
                end, c = parents[end]  # type: ignore[misc]
                chars.append(c)
            out = "".join(reversed(chars))
        self._memo[state] = out
        return out


_AUTOMATA: dict[str, _Automaton | None] = {}
_AUTOMATA_LOCK = threading.Lock()


def _automaton(pattern: str) -> _Automaton | None:
    """The pattern's automaton, built once per process (None: too long or not parsable)."""
    with _AUTOMATA_LOCK:
        if pattern in _AUTOMATA:
            return _AUTOMATA[pattern]
    built: _Automaton | None = None
    if len(pattern) <= MAX_PATTERN:
        try:
            built = _Automaton(pattern)
        except Exception:  # interegular rejects some valid syntax (classes, flags): no oracle
            built = None
    with _AUTOMATA_LOCK:
        if len(_AUTOMATA) > 1024:
            _AUTOMATA.clear()
        _AUTOMATA[pattern] = built
    return built


class ClosingHints:
    """The patterns a grammar mentions and their characters (see the module docstring)."""

    def __init__(self, format_chars: frozenset[str] = frozenset(), patterns: tuple[str, ...] = (),
                 terminators: tuple[str, ...] = ()) -> None:
        self.patterns = patterns
        self.terminators = terminators
        self._format_chars = format_chars
        self._chars: frozenset[str] | None = None

    @property
    def chars(self) -> frozenset[str]:
        """The characters the grammar's formats need and its patterns treat apart (built on
        first use: it parses the patterns)."""
        if self._chars is None:
            chars = set(self._format_chars)
            for pattern in self.patterns:
                auto = _automaton(pattern)
                if auto is not None:
                    chars |= auto.distinct
            self._chars = frozenset(c for c in chars if c.isascii() and c.isprintable())
        return self._chars

    def completions(self, value: str) -> list[str]:
        """Shortest endings of the string ``value`` (decoded) under each pattern it still fits,
        shortest first; empty strings excluded (the search only asks where ``"`` is refused)."""
        found = set()
        for pattern in self.patterns:
            auto = _automaton(pattern)
            if auto is None:
                continue
            with auto.lock:
                state = auto.state_after(value)
                ending = None if state is None else auto.shortest(state)
            if ending:
                found.add(ending)
        return sorted(found, key=lambda s: (len(s), s))


NO_HINTS = ClosingHints()


def grammar_hints(grammar: str) -> ClosingHints:
    """The hints of llguidance's grammar text: JSON (a JSON Schema; a regex as Lark) or Lark
    (inline ``%json`` schemas and ``/regex/`` terminals)."""
    texts = [grammar]
    if grammar.startswith("{"):
        try:
            parts = json.loads(grammar).get("grammars") or []
            texts = [json.dumps(p.get("json_schema")) if p.get("json_schema") is not None
                     else p.get("lark_grammar") or "" for p in parts]
        except (ValueError, AttributeError):
            pass
    chars: set[str] = set()
    patterns: list[str] = []  # JSON Schema patterns, then Lark terminals (as anchored patterns)
    terminators: list[str] = []
    for text in texts:
        for key, literal in _KEYWORD.findall(text):
            try:
                value = json.loads(literal)
            except ValueError:
                continue
            if key == "format":
                chars.update(_FORMAT_CHARACTERS.get(value, ""))
            else:
                chars.update(value)
                if value not in patterns:
                    patterns.append(value)
        for regex in _LARK_REGEX.findall(text):
            if regex not in patterns:
                patterns.append("^" + regex + "$")
        for literal in _LAZY_END.findall(text):
            end = _unescape(literal)
            if end not in terminators:
                terminators.append(end)
    return ClosingHints(frozenset(chars), tuple(patterns[:MAX_PATTERNS]), tuple(terminators))


def _unescape(literal: str) -> str:
    """The text a regex literal body matches (``re.escape``'s output, ``\\n`` a line break)."""
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), literal)
