"""No request sets the grammar engine's options: they are the server's.

llguidance reads options from its input: a schema's ``x-guidance`` object (separators,
``lenient``, ...: stripped by the backend, ``llguidance_engine.py``), and in a Lark grammar a
``%llguidance {...}`` line (``allow_invalid_utf8``, lexer and parser switches) and the
``x-guidance`` of each embedded ``%json {...}`` schema.  A user's grammar with
``%llguidance {"allow_invalid_utf8": true}`` got past the invalid-UTF-8 check.  Like
``x-guidance`` in a schema, these are dropped from a user's grammar before the engine reads it:
a ``%llguidance`` line's object becomes ``{}`` (a grammar written for llguidance still
compiles, with the server's options) and embedded schemas lose their ``x-guidance``.  String
literals, regexes and comments are read over, so text inside them is never touched.
"""

from __future__ import annotations

import json
import re

_OPTIONS_KEY = "x-guidance"
# What the scan steps over whole (from lark_budget's reader), and the directives it rewrites.
_SCAN = re.compile(r"""
    (?P<comment>//[^\n]*|\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"i?)
  | (?P<regex>/(?!/)(?:[^/\\\n]|\\.)+/[imslux]*)
  | (?P<directive>%(?:llguidance|json)\b\s*)
""", re.VERBOSE)


def without_engine_options(grammar: str) -> str:
    """``grammar`` (Lark, llguidance dialect) with every engine option a request could set
    removed: ``%llguidance {...}`` objects emptied, ``x-guidance`` dropped from ``%json``."""
    if "%llguidance" not in grammar and _OPTIONS_KEY not in grammar:
        return grammar  # the usual case: nothing to scan
    out: list[str] = []
    pos = 0
    decoder = json.JSONDecoder()
    while True:
        m = _SCAN.search(grammar, pos)
        if m is None:
            out.append(grammar[pos:])
            return "".join(out)
        out.append(grammar[pos:m.end()])
        pos = m.end()
        if m.lastgroup != "directive" or not grammar.startswith("{", pos):
            continue
        try:
            value, end = decoder.raw_decode(grammar, pos)
        except ValueError:
            continue  # not JSON: the engine says what is wrong with it
        if m.group().startswith("%llguidance"):
            replacement = "{}"
        elif isinstance(value, dict) and _OPTIONS_KEY in value:
            replacement = json.dumps({k: v for k, v in value.items() if k != _OPTIONS_KEY})
        else:
            replacement = grammar[pos:end]
        out.append(replacement)
        pos = end
