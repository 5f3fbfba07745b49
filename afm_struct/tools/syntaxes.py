"""The registry of argument writings: per ``body``, its grammar builder, parser and writer.

A tool-call syntax is data (an entry of ``grammars/tool_formats.json``); what the data cannot
say is how a kind of argument writing is constrained, read and written, and that lives here,
once per kind:

======================  ==================================  =====================================
body                    grammar (call rules)                parser
======================  ==================================  =====================================
object, array,          ``grammar.call_rules`` (%json)      ``parser.CallParser``
sequence, name_args
tagged                  ``tagged_grammar``                  ``tagged_parser.TaggedCallParser``
pythonic                ``pythonic_grammar``                ``pythonic_parser.PythonicCallParser``
======================  ==================================  =====================================

So the next syntax of an existing kind (another tag-pair family, another JSON-bodied one) is one
entry in the table, and a new kind is one grammar builder and one parser registered here.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..grammar.spec import Rung, ToolDef
from .formats import ToolFormat
from .parser import CallParser
from .pythonic_grammar import py_literal, pythonic_call_rules, pythonic_rung
from .pythonic_parser import PythonicCallParser
from .tagged_grammar import tagged_call_rules, tagged_rung
from .tagged_parser import TaggedCallParser
from .values import property_schemas, render_value

if TYPE_CHECKING:
    from ..models.tokenizer import Tokenizer


def syntax_call_rules(tokenizer: Tokenizer, fmt: ToolFormat, embedded: list[tuple[str, Any]]
                      ) -> tuple[str, str]:
    """(the ``call`` alternatives, the rule definitions) of a non-JSON body."""
    if fmt.body == "tagged":
        return tagged_call_rules(tokenizer, fmt, embedded)
    if fmt.body == "pythonic":
        calls, rules, _ = pythonic_call_rules(embedded)
        return calls, rules
    raise ValueError(f"tool format {fmt.name!r}: no call rules for body {fmt.body!r}")


def served_rung(fmt: ToolFormat, schema: Any, rung: Rung, why: str | None) -> tuple[Rung, str | None]:
    """The rung a tool is served at in ``fmt``'s writing (below ``rung`` where the writing
    cannot express part of the schema), with the reason."""
    if fmt.body == "tagged":
        served, reason = tagged_rung(schema, rung)
    elif fmt.body == "pythonic":
        _, _, inexact = pythonic_call_rules([("t", schema)])
        served, reason = pythonic_rung(rung, inexact.get("t"))
    else:
        return rung, why
    return served, reason or why


def make_call_parser(fmt: ToolFormat, *, tools: tuple[ToolDef, ...] = (), detect_calls: bool = True,
                     max_calls: int | None = None) -> Any:
    """A fresh streaming parser for ``fmt`` (events of :mod:`afm_struct.tools.parser`)."""
    if fmt.body == "tagged":
        return TaggedCallParser(fmt, tools=tools, detect_calls=detect_calls, max_calls=max_calls)
    if fmt.body == "pythonic":
        return PythonicCallParser(fmt, detect_calls=detect_calls, max_calls=max_calls)
    return CallParser(fmt, detect_calls=detect_calls, max_calls=max_calls)


def render_call(fmt: ToolFormat, name: str, arguments: dict[str, Any],
                parameters: Any = None) -> str:
    """One call written exactly as ``fmt``'s grammar writes it, open and close included (for a
    history written by us, and what the parser reads back)."""
    lay = fmt.layout
    if fmt.body == "tagged":
        props = property_schemas(parameters)
        pairs = "".join(f"{lay.key_before}{k}{lay.key_after}{render_value(props.get(k), v)}"
                        f"{lay.value_after}" for k, v in arguments.items())
        return f"{fmt.open}{lay.name_before}{name}{lay.name_after}{pairs}{lay.call_after}{fmt.close}"
    if fmt.body == "pythonic":
        kwargs = ", ".join(f"{k}={py_literal(v)}" for k, v in arguments.items())
        return f"{name}({kwargs})"
    args = json.dumps(arguments, ensure_ascii=False)
    if fmt.body == "name_args":
        return f"{fmt.open}{name}{lay.name_suffix}{fmt.args_marker}{args}{fmt.close}"
    call = json.dumps({fmt.name_key: name, fmt.arguments_key: arguments}, ensure_ascii=False)
    if fmt.body == "object":
        return f"{fmt.open}\n{call}\n{fmt.close}"
    return call


def render_calls(fmt: ToolFormat, calls: list[tuple[str, dict[str, Any], Any]]) -> str:
    """Several calls as ``fmt``'s grammar writes them (``(name, arguments, parameters)``)."""
    parts = [render_call(fmt, n, a, p) for n, a, p in calls]
    if fmt.body == "pythonic":
        return fmt.layout.list_open + fmt.separator.join(parts) + fmt.layout.list_close
    if fmt.body == "array":
        return fmt.open + "[" + fmt.separator.join(parts) + "]"
    return fmt.separator.join(parts)
