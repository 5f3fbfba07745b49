"""Grammar texts of other servers' dialects → the Lark that :class:`LarkRequest` compiles.

llama.cpp's GBNF and SGLang's / xgrammar's EBNF write rules as ``name ::= body``; llguidance
reads Lark (``name: body``).  llguidance ships a GBNF → Lark converter
(``llguidance.gbnf_to_lark``); it is used as is, and its complaints are turned into 400s that
say where in the caller's grammar the problem is (line and column), never the converter's
internals.  A ``choice`` (exactly one of a list of strings) is a one-rule Lark grammar.
"""

from __future__ import annotations

import json
import re
from typing import Literal

from ..errors import SchemaError
from .closer.lark_budget import check_grammar_size
from .diagnostics import safe_phrase

GrammarSyntax = Literal["gbnf", "lark"]

# A GBNF / EBNF rule definition at the start of a line: ``root ::= ...`` (Lark uses ``:``).
_BNF_RULE = re.compile(r"(?m)^[ \t]*[A-Za-z_][A-Za-z0-9_-]*[ \t]*::=")
# The converter's syntax complaints: a fixed phrase, at most a token of the caller's grammar.
_CONVERTER_PHRASE = re.compile(r"^(Expected|Unexpected|Invalid|Unterminated)[^\n]{0,60}$")


def grammar_syntax(text: str) -> GrammarSyntax:
    """``gbnf`` when ``text`` defines its rules with ``::=`` (llama.cpp GBNF, xgrammar EBNF),
    else ``lark`` (what vLLM's guidance backend and llguidance read)."""
    return "gbnf" if _BNF_RULE.search(text) else "lark"


def _line_column(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def gbnf_to_lark(text: str, *, param: str) -> str:
    """``text`` (GBNF / EBNF, ``root`` the start rule) as Lark; a grammar that does not parse is
    a :class:`SchemaError` with the line and column in ``text`` and ``param`` the request field."""
    from llguidance import gbnf_to_lark as converter

    try:
        return converter.gbnf_to_lark(text)
    except converter.GbnfToLarkError as exc:
        line, column = _line_column(text, exc.pos.pos)
        # The converter appends "at line N, <excerpt>"; only its leading phrase is kept.
        head = str(exc).rsplit(" at line ", 1)[0]
        phrase = head if _CONVERTER_PHRASE.match(head) else "syntax error"
        raise SchemaError(f"invalid GBNF grammar at line {line}, column {column}: {phrase}",
                          path=f"$.{param}", param=param) from exc
    except Exception as exc:  # rule-level problems (no root, undefined rule) carry no position
        phrase = safe_phrase(str(exc)) or "the grammar does not convert to Lark"
        raise SchemaError(f"invalid GBNF grammar: {phrase}", path=f"$.{param}", param=param) from exc


def to_lark(text: str, *, param: str) -> tuple[str, GrammarSyntax]:
    """``text`` as Lark, and the syntax it was read in (see :func:`grammar_syntax`); an
    oversized text is refused before it is read."""
    check_grammar_size(text, param=param)
    syntax = grammar_syntax(text)
    return (gbnf_to_lark(text, param=param) if syntax == "gbnf" else text), syntax


def choice_grammar(choices: list[str]) -> str:
    """A Lark grammar whose only outputs are the strings of ``choices`` (JSON string literals
    are Lark string literals, escapes included)."""
    return "start: " + " | ".join(json.dumps(c, ensure_ascii=False) for c in choices)
