"""One request's tool handling, decided once at admission: :func:`plan_tools` → :class:`ToolPlan`.

The plan says what to render (messages and template ``tools``), which constraint the generator
applies (``None``: free text, calls parsed afterwards), whether a strict tool runs best-effort
(``X-Grammar-Constraints: downgraded``) and builds the request's turn with its call layer
(:class:`ToolCallRouter`, an :class:`~afm_struct.turn.turn.Turn`).

Which requests are constrained:

* ``none``: no constraint, no calls parsed, no tools in the prompt.
* ``auto``: free text until the format's opener, then a call whose name is one of the tools
  and whose arguments follow that tool's schema (lazy).
* ``required`` / a named function: constrained from the first token (at least one call, or
  exactly the named one).

Arguments follow the declared ``parameters`` whether the tool is strict or not (see
:mod:`afm_struct.tools.grammar`): strict schemas are read with closed objects, as OpenAI's
strict mode; non-strict ones with JSON Schema's own semantics.  ``constrain_non_strict=False``
leaves requests with no strict tool unconstrained (the benchmark's free baseline).
* ``parallel_tool_calls: false``: the grammar allows one call; the router keeps one call.
* ``max_calls`` (the Responses API's ``max_tool_calls``): the router ends the turn once that
  many calls are whole; one is ``parallel_tool_calls: false``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..grammar.compiler import CompiledConstraint
from ..grammar.spec import CompileOptions, ValidationOutcome
from ..grammar.validation import validate_json
from ..turn.reasoning import ReasoningTags
from .call_stream import ToolCallRouter, new_call_id
from .definitions import Choice, ToolDef, parse_choice, parse_tools
from .formats import (
    FormatTable,
    ToolFormat,
    chat_template_of,
    detect_format,
    load_table,
    template_knows_tools,
)
from .grammar import Compile, answer_schema, compile_input_checks, compile_tool_grammar
from .lark_input import escaped_input
from .prompt import render_messages

if TYPE_CHECKING:
    from ..models.tokenizer import Tokenizer


@dataclass(frozen=True)
class ToolPlan:
    """How one request's tools are prompted, constrained and streamed."""

    format: ToolFormat
    choice: Choice
    tools: tuple[ToolDef, ...]
    parallel: bool
    constraint: CompiledConstraint | None  # for GenerationRequest.constraint
    downgraded: bool  # a strict tool runs best-effort (afm_struct.grammar.downgrade.is_downgraded)
    reason: str | None
    messages: list[dict[str, Any]]  # to render with the chat template
    template_tools: list[dict[str, Any]] | None  # the template's ``tools=`` (None: in the prompt)
    grammar: str | None = None
    rungs: dict[str, str] = field(default_factory=dict)  # strict tools: name → ladder rung
    guided: dict[str, str] = field(default_factory=dict)  # non-strict tools: name → ladder rung
    # What ``messages`` / ``template_tools`` were rendered from, to render them again marked.
    source_messages: list[dict[str, Any]] = field(default_factory=list)
    knows_tools: bool = True
    table: FormatTable | None = None
    answered: bool = False  # the output format's JSON is enforced by this grammar (no free text)
    # The rung the grammar serves the answer at when :attr:`answered` (that of a plain request).
    answer_rung: str | None = None
    # Custom tools with a Lark grammar: name → the constraint their input must satisfy whole.
    input_checks: dict[str, CompiledConstraint] = field(default_factory=dict)
    max_calls: int | None = None  # the turn ends after this many calls (None: no limit)

    @property
    def callable_tools(self) -> tuple[ToolDef, ...]:
        """The tools a call may name under this ``tool_choice``."""
        if self.choice.kind == "none":
            return ()
        if self.choice.kind == "function":
            return tuple(t for t in self.tools if t.name == self.choice.name)
        return self.tools

    def make_router(self, *, reasoning_tags: ReasoningTags | tuple[str, str] | None = None,
                    start_in_reasoning: bool = False,
                    id_factory: Callable[[], str] = new_call_id) -> ToolCallRouter:
        """This request's turn (:class:`~afm_struct.turn.turn.Turn` with the format's call
        layer; one per generation); ``id_factory`` names its calls."""
        return ToolCallRouter(self.format, detect_calls=self.choice.kind != "none",
                              max_calls=1 if not self.parallel else self.max_calls,
                              calls_only=self.choice.kind in ("required", "function"),
                              reasoning_tags=reasoning_tags,
                              start_in_reasoning=start_in_reasoning, id_factory=id_factory,
                              tools=self.callable_tools)

    def encode_prompt(self, tokenizer: Tokenizer, template_kwargs: dict[str, Any] | None = None, *,
                      context_length: int | None = None) -> list[int]:
        """Prompt token ids for this plan's messages (the tokenizer facade's ``encode_rendered``:
        request text, tool definitions included, is tokenized as plain text; ``context_length``
        refuses a prompt certainly too long before tokenizing it)."""
        table = self.table or load_table()

        def render(mark: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
            if mark is None:
                return self.messages, self.template_tools
            return render_messages(self.source_messages, self.tools, self.choice, self.format, table,
                                   knows_tools=self.knows_tools, mark=mark)

        if context_length is None:
            return tokenizer.encode_rendered(render, template_kwargs=template_kwargs)
        return tokenizer.encode_rendered(render, template_kwargs=template_kwargs,
                                         context_length=context_length)

    def constrained(self, tokenizer: Tokenizer, *, options: CompileOptions | None = None,
                    compile_fn: Compile | None = None, constrain_non_strict: bool = True,
                    closed_objects: bool = True, answer: Any = None) -> ToolPlan:
        """This plan with its tool grammar compiled (see :func:`plan_tools`); unchanged when no
        call is constrained.  ``answer``: the output format's request (a JSON Schema or JSON
        object), enforced in the grammar as the alternative to the calls where it can be
        (:attr:`answered`).  Compiles (possibly slowly): call it off the event loop."""
        callable_tools = self.callable_tools
        if not callable_tools or not (any(t.strict for t in callable_tools) or constrain_non_strict):
            return self
        options = options or CompileOptions()
        required = self.choice.kind in ("required", "function")
        branch = None if required else answer_schema(tokenizer, self.format, answer, options, compile_fn)
        compiled = compile_tool_grammar(tokenizer, self.format, callable_tools,
                                        required=required,
                                        parallel=self.parallel, options=options,
                                        compile_fn=compile_fn, closed=closed_objects,
                                        answer=None if branch is None else branch.schema)
        return replace(self, constraint=compiled.constraint, downgraded=compiled.downgraded,
                       reason=compiled.reason, grammar=compiled.grammar, rungs=compiled.rungs,
                       guided=compiled.guided, answered=compiled.answered,
                       answer_rung=branch.rung.value if compiled.answered and branch else None,
                       input_checks=compile_input_checks(tokenizer, callable_tools, options=options,
                                                         compile_fn=compile_fn))

    def validate_call(self, name: str, arguments: str) -> ValidationOutcome:
        """Check one finished call against its tool's ``parameters``, and a custom tool's input
        against its Lark grammar (unknown name: not ok)."""
        for tool in self.tools:
            if tool.name == name:
                outcome = validate_json(arguments, tool.parameters, require_object=True)
                check = self.input_checks.get(name)
                if not outcome.ok or check is None:
                    return outcome
                text = outcome.value.get("input") if isinstance(outcome.value, dict) else None
                if isinstance(text, str) and check.validate(escaped_input(text)).ok:
                    return outcome
                return ValidationOutcome(False, ("the input does not follow the tool's Lark grammar",),
                                         outcome.value)
        return ValidationOutcome(False, (f"unknown tool {name!r}",))


def plan_tools(tokenizer: Tokenizer, tools: Any, tool_choice: Any = None,
               parallel_tool_calls: bool | None = None, *,
               messages: list[dict[str, Any]] | None = None, options: CompileOptions | None = None,
               format_name: str | None = None, chat_template: str | None = None,
               constrain_non_strict: bool = True, compile_fn: Compile | None = None,
               closed_objects: bool = True, compile_grammar: bool = True,
               max_calls: int | None = None) -> ToolPlan:
    """Plan tool handling for one request (400 errors for bad tools / tool_choice).

    ``tools`` / ``tool_choice`` are the OpenAI values (dicts or objects with the same fields);
    ``messages`` the chat-template dicts; ``format_name`` overrides format detection and
    ``chat_template`` the template it is detected from (default: the tokenizer's);
    ``compile_fn(tokenizer, request)`` replaces the shared compiler (the server's hook);
    ``closed_objects`` reads strict schemas' objects as closed (OpenAI strict semantics);
    ``compile_grammar=False`` plans the prompt only (:meth:`ToolPlan.constrained` compiles later);
    ``max_calls`` ends the turn after that many calls (1: as ``parallel_tool_calls: false``).
    Compiles (possibly slowly, bounded by ``options.timeout_s``): call it off the event loop.
    """
    table = load_table()
    defs = parse_tools(tools)
    choice = parse_choice(tool_choice, defs)
    template = chat_template if chat_template is not None else chat_template_of(tokenizer)
    knows_tools = template_knows_tools(template)
    fmt = detect_format(template, name=format_name, table=table)
    # A named function means one call to it (as vLLM reads it, and what instructor and the
    # openai parse helpers expect): repeating it wasted the budget (the 135M model called it
    # twice, and instructor refused the `length` finish).
    parallel = parallel_tool_calls is not False and choice.kind != "function" and max_calls != 1
    source = list(messages or [])
    rendered, template_tools = render_messages(source, defs, choice, fmt, table, knows_tools=knows_tools)
    plan = ToolPlan(format=fmt, choice=choice, tools=defs, parallel=parallel, constraint=None,
                    downgraded=False, reason=None, messages=rendered, template_tools=template_tools,
                    source_messages=source, knows_tools=knows_tools, table=table, max_calls=max_calls)
    if not compile_grammar:
        return plan
    return plan.constrained(tokenizer, options=options, compile_fn=compile_fn,
                            constrain_non_strict=constrain_non_strict, closed_objects=closed_objects)
