"""A generation plan → an admitted run: everything that happens before any header is sent.

:func:`prepare` renders and tokenizes the plan's conversation (a prompt that cannot fit is
refused first), compiles its output format and tool grammar, and makes the response's identity;
:func:`admit` registers the correlation ID and submits to the scheduler.  Every failure here is
an HTTP error, whatever the protocol: errors name the protocol's request paths (the plan says
where its parts came from).  Compile and tokenize run off the event loop.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING

from afm_struct.decoding.heap import RELEASE_AFTER_TOKENS, release_free_memory
from afm_struct.decoding.hidden_tokens import hidden_token_ids
from afm_struct.decoding.length_close import check_budget
from afm_struct.decoding.reasoning_gate import ReasoningTags, detect_reasoning_tags
from afm_struct.decoding.requests import GenerationRequest
from afm_struct.errors import InvalidRequestError
from afm_struct.serving.plan import ENGINE_CONVERSATION, Conversation, GenerationPlan
from afm_struct.serving.reasoning_budget import HEADER as REASONING_HEADER
from afm_struct.serving.reasoning_budget import default_reasoning_budget
from afm_struct.serving.token_details import DETAIL_TOP
from afm_struct.tools import ToolPlan, plan_tools
from afm_struct.turn.events import ResponseIdentity
from afm_struct.turn.reasoning import SYNTAXES, for_prompt, syntax_of
from afm_struct.turn.turn import Turn

from .channels import make_router
from .constraint_mode import calls_only, mode_headers
from .prepared import Prepared
from .profile import TokenCounter
from .run import Run
from .state import ServerState
from .structured import plan_structured

if TYPE_CHECKING:
    from afm_struct.models.tokenizer import Tokenizer


def details_logprobs(plan: GenerationPlan) -> int | None:
    """The logprobs the generator tracks: the request's, or (token details asked, which ride
    the logprob entries) :data:`DETAIL_TOP` alternatives when it asked for none."""
    if plan.delivery.token_details and plan.logprobs is None:
        return DETAIL_TOP
    return plan.logprobs


async def prepare(state: ServerState, plan: GenerationPlan, *, started: float | None = None) -> Prepared:
    """Render, tokenize (a prompt that cannot fit is refused here), then compile the
    constraint; 400/404 errors raised here.  ``started``: when the request arrived (profiles)."""
    started = time.perf_counter() if started is None else started
    tokenizer = state.loaded.tokenizer
    conversation = plan.conversation
    # The prompt first: one that cannot fit is refused before any grammar is compiled, and one
    # whose length alone says so before it is tokenized.
    with plan.paths.naming():
        tool_plan = await plan_request_tools(state, plan)
        prompt_ids = await asyncio.get_running_loop().run_in_executor(
            TOKENIZER_THREAD, tokenize_prompt, state, conversation, tool_plan)
        # an explicit budget is not lowered: 400 if it cannot fit
        fit = not plan.budget.explicit
        state.scheduler.generator.max_tokens_for(
            GenerationRequest(prompt_ids=prompt_ids, params=plan.sampling, fit_to_context=fit))
    structured = await plan_structured(tokenizer, plan.output, compile_fn=state.compile_fn)
    if tool_plan is not None:
        # A JSON format with a mask of its own goes into the tool grammar as the answer the
        # calls alternate with, at the rung it has alone (exact, relaxed or generic: see
        # tools/answer_branch.py), when the protocol asks.
        composed = plan.tools.format_answer and structured.json_output and structured.constraint is not None
        answer = plan.output.constraint_request() if composed else None
        tool_plan = await asyncio.to_thread(tool_plan.constrained, tokenizer, compile_fn=state.compile_fn,
                                            answer=answer)
    constraint = structured.constraint
    if tool_plan is not None and tool_plan.constraint is not None:
        # One mask per request: the tool grammar wins.  It holds the JSON answer when it could
        # (streamed as generated when exact; deferred and sanitized below it, as a plain request);
        # else it allows free text where the format does, and a JSON output format runs
        # best-effort, deferred and sanitized.
        if not tool_plan.answered:
            structured = structured.without_mask("a tool grammar owns the mask")
            if calls_only(tool_plan):  # no answer can be written: the format is not downgraded
                structured = replace(structured, downgraded=False)
        constraint = tool_plan.constraint
    # A raw prompt's text is the caller's: no thinking block is split off it.
    reasoning = reasoning_tags(state, prompt_ids) if conversation.prompt is None else None
    if reasoning is None and tool_plan is not None and tool_plan.constraint is not None:
        # A call syntax with its own reasoning channel (Harmony's analysis) writes it in its
        # grammar: the generator still leaves it on a budget or when max_tokens cuts it.
        reasoning = syntax_of(tool_plan.format.reasoning)
    if reasoning is not None and plan.budget.reasoning_tokens is not None:
        reasoning = replace(reasoning, budget=plan.budget.reasoning_tokens)
    counter = TokenCounter()
    close = state.settings.close_on_length if plan.close_on_length is None else plan.close_on_length
    generation = GenerationRequest(prompt_ids=prompt_ids, params=plan.sampling, constraint=constraint,
                                   logits_processors=[counter], request_id=plan.request_id,
                                   close_on_length=close, logprobs=details_logprobs(plan),
                                   token_details=plan.delivery.token_details,
                                   grammar_budget_s=state.settings.grammar_budget_s,
                                   hidden_token_ids=hidden_tokens(tokenizer, plan, reasoning, tool_plan),
                                   stops_cut_grammar=tool_plan is None,
                                   fit_to_context=fit,
                                   # the mask governs the answer, after any thinking block
                                   reasoning=reasoning,
                                   turn=request_turn(state, reasoning, tool_plan))
    answer_floor = 0
    if close and constraint is not None:
        # No output can be valid when the budget is below the shortest one the grammar allows:
        # refused now (a 400 naming both numbers) rather than closed to text that cannot parse.
        with plan.paths.naming():
            answer_floor = await asyncio.to_thread(check_request_budget, state, plan, generation, tool_plan)
    default_reasoning = None
    if reasoning is not None and constraint is not None and not plan.budget.reasoning_set:
        # Thinking must leave the constrained answer room (serving/reasoning_budget.py).
        default_reasoning = default_reasoning_budget(
            state.scheduler.generator.max_tokens_for(generation), answer_floor)
        reasoning = generation.reasoning = replace(reasoning, budget=default_reasoning.tokens)
    ident = ResponseIdentity(id=state.ids.new_id(plan.id_prefix), created=state.ids.created(),
                             model=plan.model)
    return Prepared(plan=plan, ident=ident, generation=generation, structured=structured,
                    counter=counter, started=started, reasoning=reasoning, tools=tool_plan,
                    default_reasoning=default_reasoning)


def request_turn(state: ServerState, reasoning: ReasoningTags | None, tool_plan: ToolPlan | None) -> Turn:
    """The request's one :class:`~afm_struct.turn.turn.Turn`: the generator feeds it and
    its gate reads it; its events go to the response (``server/run.py``)."""
    opened = bool(reasoning and reasoning.opened_in_prompt)
    if tool_plan is not None:
        return tool_plan.make_router(reasoning_tags=reasoning, start_in_reasoning=opened,
                                     id_factory=lambda: state.ids.new_id("call_"))
    return make_router(reasoning_tags=reasoning, start_in_reasoning=opened)


def hidden_tokens(tokenizer: Tokenizer, plan: GenerationPlan, reasoning: ReasoningTags | None,
                  tool_plan: ToolPlan | None) -> frozenset[int]:
    """The tokens whose text the response never shows (``skip_special_tokens``): every special
    or markup token but the thinking tags and tool markers this request's router reads."""
    if not plan.skip_special_tokens:
        return frozenset()
    keep = reasoning.texts if reasoning is not None else ()
    if tool_plan is not None:  # its markers, and its own reasoning pair (Harmony's analysis channel)
        keep += tool_plan.format.markup + tuple(getattr(tool_plan.format, "reasoning", None) or ())
    return hidden_token_ids(tokenizer, keep=keep)


async def plan_request_tools(state: ServerState, plan: GenerationPlan) -> ToolPlan | None:
    """The tools plan's prompt and call router, or None without tools; its grammar is compiled
    later (:meth:`ToolPlan.constrained`), once the prompt is known to fit."""
    use = plan.tools
    if not use.tools:
        return None
    return await asyncio.to_thread(plan_tools, state.loaded.tokenizer, use.tools, use.choice, use.parallel,
                                   messages=plan.conversation.messages, compile_fn=state.compile_fn,
                                   compile_grammar=False, max_calls=use.max_calls)


# Prompts are rendered and tokenized on one thread: its glibc arena alone holds what a long
# prompt took, so the free top of the arena that malloc_trim cannot return is one thread's, and
# is reused by the next long prompt (with a pool, every worker's arena kept its own).  Two
# encodes in parallel were no faster than one after the other (measured on 2 cores).
TOKENIZER_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="afm-tokenize")


def tokenize_prompt(state: ServerState, conversation: Conversation, tool_plan: ToolPlan | None) -> list[int]:
    """The prompt's token ids (on :data:`TOKENIZER_THREAD`: rendering and tokenizing a long
    chat take a while).  A prompt its length alone shows to be too long is refused before tokenizing; a
    long one gives the memory tokenizing it took back to the OS.  A raw prompt is tokenized as
    written (:meth:`Conversation.raw`); it must hold at least one token."""
    tokenizer = state.loaded.tokenizer
    context = state.loaded.info.context_length
    template_kwargs = conversation.template_variables()
    if conversation.prompt is not None:
        ids = tokenizer.encode_raw_prompt(conversation.prompt, context_length=context)
        if not ids:
            raise InvalidRequestError("the prompt is empty: send at least one token of text",
                                      param=ENGINE_CONVERSATION, code="invalid_value")
    elif tool_plan is not None:
        ids = tool_plan.encode_prompt(tokenizer, template_kwargs, context_length=context)
    else:
        ids = tokenizer.encode_chat(conversation.messages, template_kwargs=template_kwargs,
                                    context_length=context)
    if len(ids) >= RELEASE_AFTER_TOKENS:
        release_free_memory()
    return ids


def check_request_budget(state: ServerState, plan: GenerationPlan, generation: GenerationRequest,
                         tool_plan: ToolPlan | None) -> int:
    """400 when the completion budget (the generator's: the plan's, or what the context leaves
    after the prompt) cannot hold the shortest output the constraint allows (see
    decoding/length_close.py); with tools, the shortest whose calls are already whole and valid.
    The error names the field that set the budget (:attr:`Budget.param`).  Returns the
    shortest output's length."""
    budget = state.scheduler.generator.max_tokens_for(generation)  # its own 400 on overflow
    usable = None if tool_plan is None else (lambda text: calls_are_whole(tool_plan, text))
    return check_budget(generation.constraint, state.loaded.tokenizer, budget, param=plan.budget.param,
                        limited_by_context=budget < generation.params.max_tokens, usable=usable)


def calls_are_whole(tool_plan: ToolPlan, text: str) -> bool:
    """True when ``text`` (a cut output) already holds at least one call, every call valid; or,
    when the grammar holds the output format's answer (:attr:`ToolPlan.answered`), no call at
    all (the grammar accepted it: it is that answer)."""
    router = tool_plan.make_router()
    router.feed(text)
    router.finish()
    calls = router.calls
    if not calls:
        return tool_plan.answered
    return all(tool_plan.validate_call(c.name or "", c.arguments).ok for c in calls)


def reasoning_tags(state: ServerState, prompt_ids: list[int]) -> ReasoningTags | None:
    """The thinking tags to split on: the model's own (auto), ``<think>`` (forced) or none."""
    mode = state.settings.reasoning
    if mode == "off":
        return None
    # Only the prompt's tail matters (does the template pre-open the block?).
    tail = state.loaded.tokenizer.decode(prompt_ids[-8:])
    if mode == "think":
        return for_prompt(SYNTAXES[0], tail)
    return detect_reasoning_tags(state.loaded.tokenizer, tail)


def admit(state: ServerState, prepared: Prepared, *, owner: str) -> Run:
    """Register the request ID under its ``owner`` (409 if that owner has it in flight) and
    submit (503 when full, 400 on overflow)."""
    entry = state.registry.register(owner, prepared.plan.request_id)
    try:
        handle = state.scheduler.submit(prepared.generation, loop=asyncio.get_running_loop())
    except BaseException:
        state.registry.discard(entry)
        raise
    state.registry.attach(entry, handle)
    return Run(state, prepared, entry, handle)


def response_headers(prepared: Prepared) -> dict[str, str]:
    """Headers beyond the correlation IDs (added by the middleware for every response)."""
    headers: dict[str, str] = {}
    if prepared.plan.delivery.stream:
        headers.update({"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                        "X-Accel-Buffering": "no"})
    if prepared.downgraded:
        headers["X-Grammar-Constraints"] = "downgraded"
    headers.update(mode_headers(prepared.structured, prepared.tools))
    if prepared.default_reasoning is not None:
        headers[REASONING_HEADER] = prepared.default_reasoning.header()
    return headers
