"""One chat completion from admission to the last byte, streaming or not.

:func:`prepare` turns the validated request into a :class:`GenerationRequest` (compile and
tokenize run off the event loop); :func:`admit` registers the correlation ID and submits to the
scheduler — every failure up to here happens before headers, as an HTTP error.  A :class:`Run`
then turns scheduler events into protocol deltas and one :class:`Outcome`; :func:`sse_body`
frames them as SSE and :func:`collect` as a ``chat.completion``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from afm_struct.decoding.closing import check_budget
from afm_struct.decoding.events import GenerationRequest
from afm_struct.decoding.outputs import Finished, FinishReason, TextDelta, Timings, Usage
from afm_struct.decoding.reasoning import ReasoningTags, detect_reasoning_tags
from afm_struct.decoding.scheduler import Handle, Scheduler
from afm_struct.errors import AfmError, GenerationError, internal_error
from afm_struct.models.loader import LoadedModel
from afm_struct.tool_calls import ToolCallAssembler
from afm_struct.tools import Choice, ToolDef, ToolPlan, parse_choice, parse_tools, plan_tools

from . import sse
from .cancel import Inflight, InflightRegistry
from .channels import Delta, DeltaRouter, make_router
from .ids import IdSource
from .logprobs import Entries, LogprobRouting, logprobs_object, within
from .memory import RELEASE_AFTER_TOKENS, release_free_memory
from .profile import (
    PROFILE_EXTENDED,
    ProfileSampler,
    TokenCounter,
    build_extended,
    build_profile,
    read_energy_uj,
)
from .request import (
    check_model,
    check_n,
    check_values,
    logprobs_wanted,
    sampling_params,
    template_messages,
)
from .schemas import ChatCompletionRequest
from .settings import ServerSettings
from .structured import Compile, StructuredPlan, plan_structured

log = logging.getLogger("afm_struct.server")


@dataclass
class ServerState:
    """What the handlers share: the model, the scheduler thread and the in-flight registry."""

    loaded: LoadedModel
    settings: ServerSettings
    scheduler: Scheduler
    registry: InflightRegistry
    blas: str | None = None
    compile_fn: Compile | None = None
    ids: IdSource = field(default_factory=IdSource)


@dataclass
class Prepared:
    """An admissible request, not yet submitted."""

    request_id: str
    ident: sse.StreamIdentity
    generation: GenerationRequest
    plan: StructuredPlan
    stream: bool
    include_usage: bool
    profile_key: str | None
    counter: TokenCounter
    started: float
    reasoning: ReasoningTags | None = None
    tools: ToolPlan | None = None

    @property
    def downgraded(self) -> bool:
        """A strict schema or strict tool grammar runs best-effort (``X-Grammar-Constraints``).

        Each plan decided its own flag by :func:`afm_struct.downgrade.is_downgraded`; the
        response is downgraded when either is.
        """
        return self.plan.downgraded or bool(self.tools and self.tools.downgraded)


@dataclass
class Outcome:
    """How the generation ended, as the wire reports it."""

    reason: FinishReason
    finished: Finished
    error: AfmError | None = None


async def prepare(state: ServerState, body: ChatCompletionRequest, *, request_id: str,
                  profile_key: str | None) -> Prepared:
    """Validate, tokenize (a prompt that cannot fit is refused here), then compile the
    constraint (400/404 errors raised here)."""
    started = time.perf_counter()
    check_values(body)
    check_n(body.n)
    model_name = check_model(body.model, state.settings.model_names(state.loaded.info.id))
    messages = template_messages(body.messages)
    # Tools and tool_choice are parsed and checked once, here (400s naming the parameter);
    # the tools plan takes the parsed values.  A schema check per tool: off the event loop.
    tools = await asyncio.to_thread(parse_tools, body.tools) if body.tools else ()
    choice = parse_choice(body.tool_choice, tools)
    params = sampling_params(body, default_max_tokens=state.settings.default_max_tokens)
    logprobs = logprobs_wanted(body)
    tokenizer = state.loaded.tokenizer
    # The prompt first: one that cannot fit is refused before any grammar is compiled, and one
    # whose length alone says so before it is tokenized.
    tool_plan = await plan_request_tools(state, tools, choice, body.parallel_tool_calls, messages)
    prompt_ids = await asyncio.get_running_loop().run_in_executor(
        TOKENIZER_THREAD, tokenize_prompt, state, messages, tool_plan, body.chat_template_kwargs or None)
    # an explicit max_tokens is not lowered: 400 if it cannot fit
    fit = body.max_completion_tokens is None and body.max_tokens is None
    state.scheduler.generator.max_tokens_for(GenerationRequest(prompt_ids=prompt_ids, params=params,
                                                               fit_to_context=fit))
    plan = await plan_structured(tokenizer, body.response_format, compile_fn=state.compile_fn)
    if tool_plan is not None:
        tool_plan = await asyncio.to_thread(tool_plan.constrained, tokenizer, compile_fn=state.compile_fn)
    constraint = plan.constraint
    if tool_plan is not None and tool_plan.constraint is not None:
        # One mask per request: the tool grammar (which allows free text where the format does)
        # wins; a JSON response_format then runs best-effort, deferred and sanitized.
        plan = plan.without_mask("a tool grammar owns the mask")
        constraint = tool_plan.constraint
    reasoning = reasoning_tags(state, prompt_ids)
    counter = TokenCounter()
    close = state.settings.close_on_length if body.afm_close_on_length is None else body.afm_close_on_length
    generation = GenerationRequest(prompt_ids=prompt_ids, params=params, constraint=constraint,
                                   logits_processors=[counter], request_id=request_id,
                                   close_on_length=close, logprobs=logprobs,
                                   stops_cut_grammar=tool_plan is None,
                                   fit_to_context=fit,
                                   # the mask governs the answer, after any thinking block
                                   reasoning=reasoning if constraint is not None else None)
    if close and constraint is not None:
        # No output can be valid when the budget is below the shortest one the grammar allows:
        # refused now (a 400 naming both numbers) rather than closed to text that cannot parse.
        await asyncio.to_thread(check_request_budget, state, body, generation, tool_plan)
    ident = sse.StreamIdentity(id=state.ids.new_id("chatcmpl-"), created=state.ids.created(),
                               model=model_name)
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    return Prepared(request_id=request_id, ident=ident, generation=generation, plan=plan,
                    stream=body.stream, include_usage=include_usage, profile_key=profile_key,
                    counter=counter, started=started, reasoning=reasoning, tools=tool_plan)


async def plan_request_tools(state: ServerState, tools: tuple[ToolDef, ...], choice: Choice,
                             parallel: bool | None, messages: list[dict[str, Any]]) -> ToolPlan | None:
    """The tools plan's prompt and call router, or None without tools; its grammar is compiled
    later (:meth:`ToolPlan.constrained`), once the prompt is known to fit."""
    if not tools:
        return None
    return await asyncio.to_thread(plan_tools, state.loaded.tokenizer, tools, choice, parallel,
                                   messages=messages, compile_fn=state.compile_fn,
                                   compile_grammar=False)


# Prompts are rendered and tokenized on one thread: its glibc arena alone holds what a long
# prompt took, so the free top of the arena that malloc_trim cannot return is one thread's, and
# is reused by the next long prompt (with a pool, every worker's arena kept its own).  Two
# encodes in parallel were no faster than one after the other (measured on 2 cores).
TOKENIZER_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="afm-tokenize")


def tokenize_prompt(state: ServerState, messages: list[dict[str, Any]], tool_plan: ToolPlan | None,
                    template_kwargs: dict[str, Any] | None) -> list[int]:
    """The prompt's token ids (on :data:`TOKENIZER_THREAD`: rendering and tokenizing a long
    chat take a while).  A prompt its length alone shows to be too long is refused before tokenizing; a
    long one gives the memory tokenizing it took back to the OS."""
    tokenizer = state.loaded.tokenizer
    context = state.loaded.info.context_length
    if tool_plan is not None:
        ids = tool_plan.encode_prompt(tokenizer, template_kwargs, context_length=context)
    else:
        ids = tokenizer.encode_chat(messages, template_kwargs=template_kwargs, context_length=context)
    if len(ids) >= RELEASE_AFTER_TOKENS:
        release_free_memory()
    return ids


def check_request_budget(state: ServerState, body: ChatCompletionRequest, generation: GenerationRequest,
                         tool_plan: ToolPlan | None) -> None:
    """400 when the completion budget (the generator's: ``max_tokens``, or what the context
    leaves after the prompt) cannot hold the shortest output the constraint allows (see
    decoding/closing.py); with tools, the shortest whose calls are already whole and valid."""
    budget = state.scheduler.generator.max_tokens_for(generation)  # its own 400 on overflow
    param = "max_completion_tokens" if body.max_completion_tokens else "max_tokens"
    usable = None if tool_plan is None else (lambda text: calls_are_whole(tool_plan, text))
    check_budget(generation.constraint, state.loaded.tokenizer, budget, param=param,
                 limited_by_context=budget < generation.params.max_tokens, usable=usable)


def calls_are_whole(tool_plan: ToolPlan, text: str) -> bool:
    """True when ``text`` (a cut output) already holds at least one call, every call valid."""
    router = tool_plan.make_router()
    router.feed(text)
    router.finish()
    calls = router.calls
    return bool(calls) and all(tool_plan.validate_call(c.name or "", c.arguments).ok for c in calls)


def reasoning_tags(state: ServerState, prompt_ids: list[int]) -> ReasoningTags | None:
    """The thinking tags to split on: the model's own (auto), ``<think>`` (forced) or none."""
    mode = state.settings.reasoning
    if mode == "off":
        return None
    # Only the prompt's tail matters (does the template pre-open the block?).
    tail = state.loaded.tokenizer.decode(prompt_ids[-8:])
    if mode == "think":
        if tail.rstrip().endswith("</think>"):  # closed by the template: no thinking this turn
            return None
        return ReasoningTags(opened_in_prompt=tail.rstrip().endswith("<think>"))
    return detect_reasoning_tags(state.loaded.tokenizer, tail)


class Run:
    """An admitted generation: its events as deltas, then one outcome; closes idempotently."""

    def __init__(self, state: ServerState, prepared: Prepared, entry: Inflight, handle: Handle) -> None:
        self.state = state
        self.prepared = prepared
        self.entry = entry
        self.handle = handle
        self.outcome: Outcome | None = None
        self._energy0 = read_energy_uj()
        self._sampler: ProfileSampler | None = None
        if prepared.profile_key == PROFILE_EXTENDED:
            self._sampler = ProfileSampler(prepared.counter, state.settings.profile_interval_s).start()

    def close(self) -> None:
        """Stop generation if still running (client gone) and release the request ID."""
        if not self.handle.finished.is_set():
            self.handle.cancel()
        self.state.registry.complete(self.entry)
        if self._sampler is not None:
            self._sampler.stop()

    @property
    def logprobs(self) -> bool:
        """True when the request asked for token logprobs."""
        return self.prepared.generation.logprobs is not None

    async def deltas(self) -> AsyncIterator[tuple[Delta, Entries | None]]:
        """Protocol deltas in order, each with the token logprob entries it carries (None when
        not asked for); afterwards :attr:`outcome` is set."""
        plan = self.prepared.plan
        tags = self.prepared.reasoning
        pair = (tags.open, tags.close) if tags else None
        opened = bool(tags and tags.opened_in_prompt)
        tool_plan = self.prepared.tools
        router: DeltaRouter = (
            tool_plan.make_router(reasoning_tags=pair, start_in_reasoning=opened,
                                  id_factory=lambda: self.state.ids.new_id("call_"))
            if tool_plan is not None else make_router(reasoning_tags=pair, start_in_reasoning=opened))
        deferred: list[str] = []
        deferred_entries: Entries = []
        routing = LogprobRouting() if self.logprobs else None

        def route(text: str, items: list[Delta], entries: Entries | None,
                  ) -> list[tuple[Delta, Entries | None]]:
            slots = routing.assign(text, items, entries) if routing is not None else [None] * len(items)
            if not plan.defer:
                return list(zip(items, slots, strict=True))
            out = []
            for d, slot in zip(items, slots, strict=True):
                if "content" in d:  # best-effort JSON: hold content back for sanitizing at the end
                    deferred.append(d.pop("content"))
                    deferred_entries.extend(slot or ())
                    slot = None
                if d:
                    out.append((d, slot))
            return out

        async for event in self.handle.events():
            if isinstance(event, TextDelta):
                for item in route(event.text, router.feed(event.text), event.logprobs):
                    yield item
                continue
            assert isinstance(event, Finished)
            for item in route("", router.finish(), None):
                yield item
            cancelled = self.state.registry.complete(self.entry)
            if event.reason == FinishReason.ERROR:
                err = event.error or GenerationError("generation failed")
                self.outcome = Outcome(FinishReason.ERROR, event, err)
                break
            if deferred:
                raw = "".join(deferred)
                text = plan.sanitize(raw)
                if text:
                    yield {"content": text}, within(deferred_entries, raw, text) if routing else None
            reason = (FinishReason.CANCELLED if cancelled
                      else router.finish_reason(event.reason, whole=event.whole))
            self.outcome = Outcome(reason, event)
        if self.outcome is None:  # defensive: the event stream ended without a Finished
            self.outcome = _failed(self, GenerationError("the server is shutting down"))

    def profile(self) -> dict[str, Any] | None:
        """The profile event payload for this run, if one was asked for."""
        key, outcome = self.prepared.profile_key, self.outcome
        if key is None or outcome is None:
            return None
        samples = self._sampler.stop() if self._sampler is not None else []
        wall = time.perf_counter() - self.prepared.started
        summary = build_profile(self.state.loaded, outcome.finished, request_id=self.prepared.request_id,
                                wall_s=wall, blas=self.state.blas,
                                energy_uj=(self._energy0, read_energy_uj()))
        if key == PROFILE_EXTENDED:
            return build_extended(summary, samples, self.state.settings.profile_interval_s)
        return summary


def _failed(run: Run, err: AfmError) -> Outcome:
    """The outcome of a run that failed without the generator's own Finished (usage: the prompt)."""
    usage = Usage(prompt_tokens=len(run.prepared.generation.prompt_ids))
    return Outcome(FinishReason.ERROR, Finished(FinishReason.ERROR, usage, Timings(), ""), err)


def admit(state: ServerState, prepared: Prepared) -> Run:
    """Register the request ID (409 if in flight) and submit (503 when full, 400 on overflow)."""
    entry = state.registry.register(prepared.request_id)
    try:
        handle = state.scheduler.submit(prepared.generation, loop=asyncio.get_running_loop())
    except BaseException:
        state.registry.discard(entry)
        raise
    state.registry.attach(entry, handle)
    return Run(state, prepared, entry, handle)


async def sse_body(run: Run) -> AsyncIterator[bytes]:
    """The SSE byte stream: deltas, finish (or error) chunk, usage, profile, ``[DONE]``."""
    ident = run.prepared.ident
    first = True
    try:
        async for delta, entries in run.deltas():
            if first:
                delta = {"role": "assistant", **delta}
                first = False
            # Asked-for logprobs ride every content / tool_calls chunk (possibly empty).
            lp = logprobs_object(entries or []) if run.logprobs and "reasoning_content" not in delta else None
            yield sse.encode_event(sse.delta_chunk(ident, delta, lp))
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a server bug mid-stream: the status is sent, so report in-band
        err = internal_error(exc, [run.prepared.request_id], what="streaming failed")
        run.outcome = _failed(run, err)
    outcome = run.outcome
    assert outcome is not None
    if first:
        yield sse.encode_event(sse.delta_chunk(ident, {"role": "assistant", "content": ""}))
    if outcome.error is not None:
        yield sse.encode_event(sse.error_chunk(ident, outcome.error))
    else:
        yield sse.encode_event(sse.finish_chunk(ident, outcome.reason))
    if run.prepared.include_usage:
        yield sse.encode_event(sse.usage_chunk(ident, outcome.finished.usage))
    profile = run.profile()
    if profile is not None and run.prepared.profile_key is not None:
        yield sse.encode_event(sse.profile_event(run.prepared.profile_key, profile))
    yield sse.DONE


async def collect(run: Run) -> dict[str, Any]:
    """The whole ``chat.completion`` body; a generation error is raised (headers not sent yet)."""
    content: list[str] = []
    reasoning: list[str] = []
    calls = ToolCallAssembler()
    entries: Entries = []
    async for delta, carried in run.deltas():
        entries.extend(carried or ())
        content.append(delta.get("content") or "")
        reasoning.append(delta.get("reasoning_content") or "")
        calls.add_delta(delta)
    outcome = run.outcome
    assert outcome is not None
    if outcome.error is not None:
        raise outcome.error
    body = sse.completion_body(
        run.prepared.ident, content="".join(content) if any(content) or not calls.calls else None,
        reasoning_content="".join(reasoning) or None,
        tool_calls=calls.to_list() or None,
        finish_reason=outcome.reason, usage=outcome.finished.usage,
        logprobs=logprobs_object(entries) if run.logprobs else None)
    profile = run.profile()
    if profile is not None and run.prepared.profile_key is not None:
        body[run.prepared.profile_key] = profile
    return body


def response_headers(prepared: Prepared) -> dict[str, str]:
    """Headers beyond the correlation IDs (added by the middleware for every response)."""
    headers: dict[str, str] = {}
    if prepared.stream:
        headers.update({"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                        "X-Accel-Buffering": "no"})
    if prepared.downgraded:
        headers["X-Grammar-Constraints"] = "downgraded"
    return headers
