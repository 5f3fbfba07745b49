"""Tool calls → one Lark grammar per request, compiled through the constraint compiler.

The format's template (``grammars/<format>.lark``) gives the call syntax and the modes
(``required_one``/``required_many``/``auto_one``/``auto_many``); this module fills in the
markers and one rule per callable tool: the name is a literal (so the parser has chosen the
tool before the arguments start) and the arguments are an inline ``%json`` schema.

Every tool's ``parameters`` guides its arguments, strict or not (as llama.cpp and vLLM do for
forced calls): instructor's TOOLS mode, LangChain's ``function_calling`` and pydantic models in
general send schemas without the flag, and a small model left to generic JSON invents their
shape.

Objects that declare properties and say nothing about extra ones take no others
(:func:`close_objects`), strict or not.  That is OpenAI's strict reading and what llama.cpp's
schema-to-grammar does for any schema; every output is still an instance of the schema as
written (closing only removes instances), and optional properties stay optional.  Left open,
the 135M model fills its budget with invented keys (``"topic_type_type"``, ``"properties"``)
in 8 of 22 BFCL/Glaive tools and in every instructor/LangChain non-strict case
(benchmarks/tools/README.md); an explicit ``additionalProperties: true`` or schema keeps an
object open.  ``closed=False`` turns this off for callers that want JSON Schema's open reading.

Each tool's ``parameters`` goes through the compiler's ladder first; its rung decides what is
embedded: the rewritten schema with exact options (enforced), with llguidance's relaxed
options, or the generic JSON of its type.  Any *strict* tool below the exact rung makes the
whole plan *downgraded* (``X-Grammar-Constraints: downgraded``), with that tool's reason; a
non-strict tool below it falls back quietly (the header concerns strict tools, per the
contract), its rung still recorded in :attr:`ToolGrammar.guided`.  The rule is
:func:`afm_struct.grammar.downgrade.is_downgraded`, shared with ``response_format``.

``tool_choice: auto`` uses llguidance's lazy lexeme: free text until the opener is generated,
then the call is constrained (exact: after the opener only a well-formed call may follow).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import GrammarLimitError, SchemaError
from ..grammar.compiler import CompiledConstraint, compile_constraint
from ..grammar.downgrade import is_downgraded
from ..grammar.engines.llguidance_engine import json_options
from ..grammar.engines.llguidance_numbers import number_issues, widen
from ..grammar.ladder import generic_schema
from ..grammar.schema.closed_objects import close_objects
from ..grammar.schema.rewrites import rewrite_schema
from ..grammar.spec import CompileOptions, JsonSchemaRequest, LarkRequest, Rung
from .answer_branch import AnswerBranch, answer_branch, answered_rules
from .definitions import ToolDef
from .formats import NON_JSON_BODIES, ToolFormat
from .lark_input import input_grammar, json_string_rules
from .lark_text import markup, text_until
from .syntaxes import served_rung, syntax_call_rules

if TYPE_CHECKING:
    from ..models.tokenizer import Tokenizer

GENERIC_ARGS: dict[str, Any] = {"type": "object"}
# ``(tokenizer, request) -> CompiledConstraint``: the server's compile hook (default: the compiler).
Compile = Callable[["Tokenizer", Any], CompiledConstraint]
# Arguments written as a JSON string (formats with ``arguments: string``): any JSON string; the
# schema cannot be enforced inside it, so strict tools in such formats are downgraded.
JSON_STRING_TERMINAL = (r'JSON_STRING: /"(\\([\"\\\/bfnrt]|u[a-fA-F0-9]{4})|'
                        r'[^\"\\\x00-\x1F\x7F])*"/')


@dataclass(frozen=True)
class ToolGrammar:
    """The compiled tool-call constraint of one request and how exactly it enforces it."""

    grammar: str
    constraint: CompiledConstraint | None
    downgraded: bool
    reason: str | None
    rungs: dict[str, str] = field(default_factory=dict)  # tool name → ladder rung (strict tools)
    guided: dict[str, str] = field(default_factory=dict)  # tool name → ladder rung (non-strict tools)
    answered: bool = False  # the output format's JSON answer is in the grammar, enforced


def grammar_marker(tokenizer: Tokenizer, text: str) -> str:
    """A marker in Lark: ``<[id]>`` when the vocabulary has it as one added token, else a literal.

    llguidance keeps special tokens out of the byte alphabet, so a literal would never match one;
    it also counts non-special added tokens shaped ``<...>`` as special (Qwen's ``<tool_call>``),
    and the id form matches any added token, so every added token is referred to by id.
    """
    hf = getattr(tokenizer, "hf", None)
    decoder = getattr(hf, "added_tokens_decoder", None) or {}
    for token_id, token in decoder.items():
        if getattr(token, "content", None) == text:
            return f"<[{int(token_id)}]>"
    return json.dumps(text)


def with_options(schema: Any, options: dict[str, Any]) -> Any:
    """``schema`` with llguidance JSON options attached (``x-guidance``: used by inline %json)."""
    if schema is True or schema == {}:
        schema = dict(GENERIC_ARGS)
    if not isinstance(schema, dict):
        return schema
    return {**schema, "x-guidance": options}


def argument_schema(tokenizer: Tokenizer, tool: ToolDef, options: CompileOptions,
                    *, enforce: bool, compile_fn: Compile | None = None,
                    closed: bool = True) -> tuple[Any, Rung, str | None]:
    """What to embed for ``tool``'s arguments: (schema with options, rung, downgrade reason).

    ``enforce`` climbs the compiler's ladder with ``tool.parameters`` (objects closed when
    ``closed``); without it, generic object arguments.
    """
    exact = json_options(options)
    if not enforce:
        return with_options(GENERIC_ARGS, exact), Rung.GENERIC_JSON, None
    params = close_objects(tool.parameters) if closed else tool.parameters
    request = JsonSchemaRequest(params, strict=tool.strict, param="tools")
    compiled = (compile_fn(tokenizer, request) if compile_fn is not None
                else compile_constraint(tokenizer, request, options))
    if compiled.rung is Rung.EXACT or compiled.rung is Rung.RELAXED:
        rewritten = rewrite_schema(params).schema
        if compiled.rung is Rung.RELAXED and (issues := number_issues(rewritten)):
            # What the relaxed rung compiled: without the numbers the engine crashes on or
            # changes (the Lark compile refuses a %json block holding them).
            wider = widen(rewritten, issues)
            if wider is None:
                return with_options(generic_schema(params) or GENERIC_ARGS, exact), Rung.GENERIC_JSON, \
                    compiled.reason
            rewritten = wider
        opts = exact if compiled.rung is Rung.EXACT else json_options(options, relaxed=True)
        return with_options(rewritten, opts), compiled.rung, compiled.reason
    generic = generic_schema(params) or GENERIC_ARGS
    return with_options(generic, exact), compiled.rung, compiled.reason or "compile_error"


@dataclass(frozen=True)
class LarkInput:
    """A custom tool's arguments ``{"input": <string>}`` whose string follows ``definition``
    (Lark, over the raw input), in place of an arguments schema."""

    definition: str


def call_rules(fmt: ToolFormat, embedded: list[tuple[str, Any]], *,
               name_suffix: str = "", split_brace: bool = False) -> tuple[str, str]:
    """(the ``call`` alternatives, the rule definitions) for ``(name, arguments schema)`` pairs
    (``name_suffix``: Lark written between a name_args body's name and its args marker;
    ``split_brace``: the call object's ``{`` is a lexeme of its own, see :func:`build_grammar`)."""
    names, lines = [], []
    for i, (name, schema) in enumerate(embedded):
        names.append(f"call_{i}")
        if fmt.body == "name_args":  # the bare name, the args marker (rule args_open), the object
            lines.append(f"call_{i}: {json.dumps(name)} {name_suffix} args_open args_{i}".replace("  ", " "))
        else:
            prefix = "{" + json.dumps(fmt.name_key) + ": " + json.dumps(name) + ", " \
                + json.dumps(fmt.arguments_key) + ": "
            head = f'"{{" {json.dumps(prefix[1:])}' if split_brace else json.dumps(prefix)
            lines.append(f"call_{i}: {head} args_{i} \"}}\"")
        if fmt.arguments == "string":
            lines.append(f"args_{i}: JSON_STRING")
        elif isinstance(schema, LarkInput):  # a custom tool's input under its own grammar
            start, rules = json_string_rules(schema.definition, f"input{i}_")
            lines.append(f"args_{i}: " + json.dumps('{"input": "') + f" {start} " + json.dumps('"}'))
            lines.append(rules)
        else:
            lines.append(f"args_{i}: %json {json.dumps(schema)}")
    if fmt.arguments == "string":
        lines.append(JSON_STRING_TERMINAL)
    return " | ".join(names), "\n".join(lines)


def build_grammar(tokenizer: Tokenizer, fmt: ToolFormat, embedded: list[tuple[str, Any]], *,
                  required: bool, parallel: bool, answer: Any = None) -> str:
    """The Lark text for ``embedded`` tools in ``fmt``'s syntax and the request's mode.

    ``answer`` (a JSON Schema with llguidance options, or None) replaces the free text of the
    ``auto`` modes: the output is then either an answer following that schema or the calls
    (the request asked for a JSON output format and allows calls)."""
    mode = ("required" if required else "auto") + ("_many" if parallel else "_one")
    if answer is not None and not required:
        mode = "answered" + ("_many" if parallel else "_one")
    opener = markup(tokenizer, fmt.open)
    closer = markup(tokenizer, fmt.close)
    args_marker = markup(tokenizer, fmt.args_marker)
    if fmt.body in NON_JSON_BODIES:
        calls, rules = syntax_call_rules(tokenizer, fmt, embedded)
    else:
        # A bare call object beside a JSON answer: llguidance lexes the call's whole head as one
        # lexeme and then never enters the answer's %json at the same "{" (measured: the answer
        # {"q": ...} was refused after '{"'); a lone "{" lexeme keeps both open.
        calls, rules = call_rules(fmt, embedded, name_suffix=markup(tokenizer, fmt.layout.name_suffix),
                                  split_brace=answer is not None and not fmt.open)
    lazy = "[lazy]" if opener.startswith('"') else ""
    text = fmt.grammar_template()
    for key, value in (("START", mode), ("OPEN", opener), ("CLOSE", closer), ("LAZY", lazy),
                       ("ARGS", args_marker), ("SEP", markup(tokenizer, fmt.separator)),
                       ("LIST_OPEN", markup(tokenizer, fmt.layout.list_open)),
                       ("LIST_CLOSE", markup(tokenizer, fmt.layout.list_close)),
                       ("CALLS", calls), ("CALL_RULES", rules)):
        text = text.replace("{{" + key + "}}", value)
    # {{UNTIL:rule:text}}: a rule of free text up to the syntax's text (Harmony's analysis).
    text = re.sub(r"\{\{UNTIL:(\w+):(.*?)\}\}",
                  lambda m: text_until(tokenizer, m.group(1), m.group(2)), text)
    # {{MARK:text}}: a syntax's own text (channel headers) with its added tokens by id.
    text = re.sub(r"\{\{MARK:(.*?)\}\}", lambda m: markup(tokenizer, m.group(1)), text)
    if mode.startswith("answered"):
        text += answered_rules(fmt, answer, lambda t: markup(tokenizer, t))
    return text


def answer_schema(tokenizer: Tokenizer, fmt: ToolFormat, request: Any, options: CompileOptions,
                  compile_fn: Compile | None = None) -> AnswerBranch | None:
    """What to embed for a JSON output format next to the calls (:func:`build_grammar`'s
    ``answer`` is its ``schema``): see :func:`~.answer_branch.answer_branch`."""
    return answer_branch(tokenizer, fmt, request, options, compile_fn)


def compile_tool_grammar(tokenizer: Tokenizer, fmt: ToolFormat, tools: tuple[ToolDef, ...], *,
                         required: bool, parallel: bool, options: CompileOptions | None = None,
                         compile_fn: Compile | None = None, closed: bool = True,
                         answer: Any = None) -> ToolGrammar:
    """Build and compile the grammar for ``tools`` (the callable ones, in request order), with
    ``answer`` in place of free text when given (:func:`answer_schema`).

    Never raises for a schema the engine cannot handle: the tool is served lower on the ladder;
    if the assembled grammar still fails, every tool falls back to generic arguments (and any
    answer to free text).
    """
    options = options or CompileOptions()

    def compile_lark(text: str) -> CompiledConstraint:
        if compile_fn is not None:
            return compile_fn(tokenizer, LarkRequest(text))
        return compile_constraint(tokenizer, LarkRequest(text), options)

    embedded: list[tuple[str, Any]] = []
    rungs: dict[str, str] = {}
    guided: dict[str, str] = {}
    reason: str | None = None
    for tool in tools:
        schema, rung, why = argument_schema(tokenizer, tool, options, enforce=True,
                                            compile_fn=compile_fn, closed=closed)
        if fmt.arguments == "string":
            rung, why = Rung.GENERIC_JSON, "arguments_as_string"
        elif fmt.body in NON_JSON_BODIES:
            rung, why = served_rung(fmt, schema, rung, why)
            if tool.input_grammar:  # the input is written unquoted there: its grammar is not enforced
                rung, why = Rung.RELAXED, f"lark_input_in_{fmt.body}_calls"
        elif tool.input_grammar:
            schema = LarkInput(tool.input_grammar)
        embedded.append((tool.name, schema))
        if not tool.strict:
            guided[tool.name] = rung.value
            continue
        rungs[tool.name] = rung.value
        if is_downgraded(tool.strict, rung) and reason is None:
            reason = f"{tool.name}: {why or rung.value}"
    grammar = build_grammar(tokenizer, fmt, embedded, required=required, parallel=parallel, answer=answer)
    answered = answer is not None and not required
    try:
        constraint = compile_lark(grammar)
    except (SchemaError, GrammarLimitError) as exc:  # custom tools' grammars are checked when read
        constraint, why = None, f"tool_grammar_error: {exc}"
    else:
        why = constraint.reason if constraint.grammar is None else None
    if constraint is None or constraint.grammar is None:
        # Fall back to names + generic arguments, which always compiles.
        generic = with_options(GENERIC_ARGS, json_options(options))
        grammar = build_grammar(tokenizer, fmt, [(t.name, generic) for t in tools],
                                required=required, parallel=parallel)
        constraint = compile_lark(grammar)
        answered = False
        reason = reason or why or "tool_grammar_error"
        rungs = {name: Rung.GENERIC_JSON.value for name in rungs}
        guided = {name: Rung.GENERIC_JSON.value for name in guided}
    # ``rungs`` holds exactly the strict tools (non-strict ones are in ``guided``).
    downgraded = any(is_downgraded(True, Rung(r)) for r in rungs.values())
    return ToolGrammar(grammar=grammar, constraint=constraint, downgraded=downgraded,
                       reason=reason if downgraded else None, rungs=rungs, guided=guided,
                       answered=answered)


def compile_input_checks(tokenizer: Tokenizer, tools: tuple[ToolDef, ...], *,
                         options: CompileOptions | None = None,
                         compile_fn: Compile | None = None) -> dict[str, CompiledConstraint]:
    """Per custom tool with a Lark grammar, the constraint its decoded input (JSON-escaped:
    :func:`~.lark_input.escaped_input`) must satisfy whole.  The arguments schema says only
    "a string", so without this a call cut inside its input (``{"input": "SELECT``, closed to
    ``"SELECT"``) would count as valid, and the budget check would admit budgets that cannot
    hold a valid call."""
    checks: dict[str, CompiledConstraint] = {}
    for tool in tools:
        if tool.input_grammar:
            request = LarkRequest(input_grammar(tool.input_grammar))
            try:
                checks[tool.name] = (compile_fn(tokenizer, request) if compile_fn is not None
                                     else compile_constraint(tokenizer, request, options or CompileOptions()))
            except SchemaError:
                continue  # the tool grammar failed on it too: served generic, flagged downgraded
    return checks
