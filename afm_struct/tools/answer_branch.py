"""The answer branch of a composed tool grammar: "call a tool, or answer in the format".

With tools the model may skip (``tool_choice: auto``) and a JSON output format, the request's
one grammar is ``answer | calls``: the calls as the tool grammar writes them
(:mod:`afm_struct.tools.grammar`), the answer a JSON value of the format's schema in place of
the free text.  The answer's schema climbs the same ladder as a plain ``json_schema`` request
(the compile hook's verdict on the same request), so it is embedded exactly at the exact rung,
with llguidance's relaxed options at the relaxed one, as the generic JSON of its type at the
generic rung; its rung is what ``X-AFM-Constraint-Mode`` reports for it.  A format that runs
unconstrained on its own is not embedded (the calls keep free text beside them, as before).

Where the answer sits in each syntax:

* syntaxes whose ``auto`` mode is ``TEXT | calls`` (Hermes, both Mistral, Qwen3-Coder and GLM
  tags, Llama JSON, pythonic): the answer replaces ``TEXT``;
* Harmony: the answer is the final channel's message (``analysis? (final | call)``).

Syntaxes with no opener read a call from the output's first character: Llama JSON's parser
takes an object with a ``name`` key for a call, pythonic's a leading ``[`` for the call list.
There the answer is embedded only when its schema cannot be read so (:func:`reads_as_call`);
otherwise the request is served as before (the format best-effort), which the header says.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..grammar.compiler import CompiledConstraint, compile_constraint
from ..grammar.engines.llguidance_engine import json_options
from ..grammar.engines.llguidance_numbers import number_issues, widen
from ..grammar.ladder import generic_schema
from ..grammar.schema.rewrites import rewrite_schema
from ..grammar.spec import CompileOptions, JsonObjectRequest, JsonSchemaRequest, Rung
from .formats import ToolFormat

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..models.tokenizer import Tokenizer

    Compile = Callable[["Tokenizer", Any], CompiledConstraint]

# The Harmony final channel's header, written by the model before its answer.
HARMONY_FINAL = "<|channel|>final<|message|>"


@dataclass(frozen=True)
class AnswerBranch:
    """The JSON answer to embed beside the calls: ``schema`` carries its llguidance options
    (``x-guidance``); ``rung`` the ladder rung it is served at, as a plain request would be."""

    schema: dict[str, Any]
    rung: Rung
    reason: str | None = None


def composable(fmt: ToolFormat) -> bool:
    """True when ``fmt``'s grammar has a place for the answer (every syntax in the table)."""
    template = fmt.grammar_template()
    return "auto_one: TEXT |" in template or "final: " in template


def answer_branch(tokenizer: Tokenizer, fmt: ToolFormat, request: Any, options: CompileOptions,
                  compile_fn: Compile | None = None) -> AnswerBranch | None:
    """What to embed for the JSON output format ``request`` beside ``fmt``'s calls, or None
    (no JSON format, a syntax with no place for it, the format served unconstrained on its own,
    or an answer the syntax's parser would read as a call)."""
    if request is None or not composable(fmt):
        return None
    if isinstance(request, JsonObjectRequest) or getattr(request, "kind", None) == "json_object":
        branch = AnswerBranch(_with(dict(_OBJECT), json_options(options)), Rung.EXACT)
    elif isinstance(request, JsonSchemaRequest):
        compiled = (compile_fn(tokenizer, request) if compile_fn is not None
                    else compile_constraint(tokenizer, request, options))
        branch = _at_rung(request.schema, Rung(compiled.rung), compiled.reason, options)
    else:
        return None
    if branch is None or reads_as_call(fmt, branch.schema):
        return None
    return branch


_OBJECT: dict[str, Any] = {"type": "object"}


def _with(schema: Any, opts: dict[str, Any]) -> dict[str, Any]:
    if schema is True or schema == {}:
        schema = {}
    return {**schema, "x-guidance": opts}


def _at_rung(schema: Any, rung: Rung, reason: str | None, options: CompileOptions) -> AnswerBranch | None:
    """The schema embedded as the ladder served it (the tool arguments' rule, tools/grammar.py)."""
    exact = json_options(options)
    if rung in (Rung.EXACT, Rung.RELAXED):
        rewritten = rewrite_schema(schema).schema
        if rung is Rung.RELAXED and (issues := number_issues(rewritten)):
            # The relaxed rung compiled it without the numbers the engine cannot take; a %json
            # block holding them is refused, so embed the widened schema (or the generic one).
            wider = widen(rewritten, issues)
            if wider is None:
                return AnswerBranch(_with(generic_schema(schema), exact), Rung.GENERIC_JSON, reason)
            rewritten = wider
        if not isinstance(rewritten, dict):  # a boolean schema: true is any JSON value
            rewritten = {}
        opts = exact if rung is Rung.EXACT else json_options(options, relaxed=True)
        return AnswerBranch(_with(rewritten, opts), rung, reason)
    if rung is Rung.GENERIC_JSON:
        return AnswerBranch(_with(generic_schema(schema), exact), rung, reason)
    return None  # unconstrained on its own: no mask to compose


def _types(schema: dict[str, Any]) -> set[str] | None:
    """The top-level JSON types ``schema`` allows (None: it does not say, so any)."""
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list):
        return set(kind)
    if "properties" in schema and not any(k in schema for k in ("anyOf", "oneOf", "allOf")):
        return {"object"}
    return None


def reads_as_call(fmt: ToolFormat, schema: dict[str, Any]) -> bool:
    """True when an answer following ``schema`` could be read as a call by ``fmt``'s parser
    (syntaxes without an opener only): pythonic's when it may be an array (a call list opens
    with ``[``); Llama JSON's when it may be an object holding the format's name key (the
    parser reads any such object as a call)."""
    if fmt.open:
        return False
    types = _types(schema)
    if fmt.body == "pythonic":
        return types is None or "array" in types
    if types is not None and "object" not in types:
        return False
    open_keys = schema.get("additionalProperties", True) is not False or "patternProperties" in schema
    if types is None or open_keys:
        return True
    return fmt.name_key in (schema.get("properties") or {})


def answered_rules(fmt: ToolFormat, answer: dict[str, Any], marker: Callable[[str], str]) -> str:
    """The Lark rules of the ``answered_one`` / ``answered_many`` modes for ``fmt``'s template:
    the calls as ``required_*``, or the answer where the ``auto`` mode had free text.
    ``marker`` writes a syntax's text in Lark (its added tokens by id)."""
    block = f"answer: %json {json.dumps(answer)}\n"
    if "auto_one: TEXT |" in fmt.grammar_template():
        return ("\nanswered_one: answer | required_one\nanswered_many: answer | required_many\n" + block)
    # Harmony: thinking first on its analysis channel, then the final channel holds the answer.
    return ("\nanswered_one: analysis? (final_answer | call_block)\n"
            "answered_many: analysis? (final_answer | call_block)\n"
            f"final_answer: {marker(HARMONY_FINAL)} answer\n" + block)
