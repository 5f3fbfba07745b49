"""A Responses API request → the generation plan, and what the response echoes back.

The one place the request's fields are read.  Checks that need no model run here, each a typed
400/404 naming the request path (``text.format.schema``, ``tools.1.type``, ``input.0.content``).
What this server does not implement is refused by name rather than ignored: ``background:
true``, ``conversation``, ``prompt``, reasoning summaries, verbosity other than medium,
``include`` values other than output-text logprobs, built-in tools, image / file / audio input,
and any field OpenAI does not document.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from afm_struct.decoding.sampling import SamplingParams
from afm_struct.errors import InvalidRequestError
from afm_struct.serving.plan import (
    TEXT,
    Budget,
    Conversation,
    Delivery,
    GenerationPlan,
    OutputFormat,
    RequestPaths,
    ToolUse,
)

from ..constraint_fields import structural_tag
from ..notes import clamped
from ..request import check_model, check_values
from ..state import ServerState
from .bounds import check_input_totals
from .items import input_turns
from .schemas import ResponsesRequest
from .tools import read_choice, read_tools

ID_PREFIX = "resp_"
PATHS = RequestPaths(conversation="input")
LOGPROBS_INCLUDE = "message.output_text.logprobs"
# Asked for by clients that pass reasoning back encrypted (Codex CLI sends it on every turn):
# accepted, and the reasoning items carry no ``encrypted_content`` (this server keeps no
# hidden state: the reasoning is returned as text, and passed back as text).
ENCRYPTED_INCLUDE = "reasoning.encrypted_content"
INCLUDES = (LOGPROBS_INCLUDE, ENCRYPTED_INCLUDE)
# reasoning.summary values: accepted (Codex CLI sends "auto"); no summary is written, so the
# reasoning items' ``summary`` is empty and the response echoes ``summary: null``.
SUMMARIES = ("auto", "concise", "detailed")
# reasoning.effort values that turn thinking off (Qwen3's switch); the others turn it on.
THINKING_OFF = ("none", "minimal")
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
# reasoning.effort as a reasoning budget (thinking tokens before the block is left; None: no
# limit), for models that think whatever their template's switch says (gpt-oss, or a template
# without the switch).
EFFORT_BUDGETS: dict[str, int | None] = {"none": 0, "minimal": 128, "low": 1024, "medium": 4096,
                                         "high": None, "xhigh": None}
MAX_METADATA_KEYS, MAX_METADATA_KEY, MAX_METADATA_VALUE = 16, 64, 512
# The fields of a json_schema text format.  ``description`` is echoed; it does not reach the
# prompt (the schema is enforced by the mask, not described to the model).
FORMAT_KEYS = ("type", "name", "schema", "strict", "description")
# ``auto``: the oldest turns are dropped until the input fits (:mod:`.truncation`);
# ``disabled`` (the default): an input over the context is a 400.
TRUNCATIONS = ("auto", "disabled")


@dataclass(frozen=True)
class Echo:
    """What the response object repeats of the request, and how its calls are shown."""

    fields: dict[str, Any]
    custom_tools: frozenset[str] = frozenset()
    input_items: list[dict[str, Any]] = field(default_factory=list)
    # Said in response headers (server/notes.py): the hosted tools left out, and the
    # max_output_tokens asked for when the context can never hold it (None: not clamped).
    ignored_tools: tuple[str, ...] = ()
    clamped_from: int | None = None


def refuse(message: str, param: str, code: str = "unsupported_parameter") -> InvalidRequestError:
    """The 400 for a field this server does not implement."""
    return InvalidRequestError(message, param=param, code=code)


def check_unsupported(body: ResponsesRequest) -> None:
    """400 naming the first field this server would otherwise have to ignore."""
    for name in body.model_extra or {}:
        raise refuse(f"unknown parameter {name!r}: the Responses API has no such field", name,
                     "unknown_parameter")
    if body.background:
        raise refuse("background: true is not supported: responses run while the request is open; "
                     "send background: false or omit it", "background")
    for name in ("conversation", "prompt"):
        if getattr(body, name) is not None:
            raise refuse(f"{name} is not supported by this server; omit it", name)
    if body.truncation not in (None, *TRUNCATIONS):
        raise InvalidRequestError(f"truncation must be 'auto' or 'disabled', not {body.truncation!r}",
                                  param="truncation", code="invalid_value")
    if body.service_tier not in (None, "auto", "default"):
        raise refuse(f"service_tier {body.service_tier!r} is not supported; send 'auto' or omit it",
                     "service_tier")
    if body.prompt_cache_retention not in (None, "in_memory"):
        raise refuse("prompt_cache_retention: only 'in_memory' (the prefix cache) is supported",
                     "prompt_cache_retention")
    reasoning = body.reasoning
    if reasoning is not None:
        for name in reasoning.model_extra or {}:
            raise refuse(f"unknown parameter reasoning.{name}", f"reasoning.{name}", "unknown_parameter")
        if reasoning.effort is not None and reasoning.effort not in EFFORTS:
            raise InvalidRequestError(f"reasoning.effort must be one of {', '.join(EFFORTS)}",
                                      param="reasoning.effort", code="invalid_value")
        for name in ("summary", "generate_summary"):
            if getattr(reasoning, name) not in (None, *SUMMARIES):
                raise InvalidRequestError(f"reasoning.{name} must be one of {', '.join(SUMMARIES)}",
                                          param=f"reasoning.{name}", code="invalid_value")
    text = body.text
    if text is not None:
        for name in text.model_extra or {}:
            raise refuse(f"unknown parameter text.{name}", f"text.{name}", "unknown_parameter")
        if text.verbosity not in (None, "medium"):
            raise refuse("text.verbosity: only 'medium' is supported", "text.verbosity")
    for j, value in enumerate(body.include or ()):
        if value not in INCLUDES:
            known = " and ".join(map(repr, INCLUDES))
            raise refuse(f"include value {value!r} is not supported; only {known}", f"include.{j}",
                         "unsupported_value")
    if body.stream_options is not None and body.stream_options.model_extra:
        name = next(iter(body.stream_options.model_extra))
        raise refuse(f"unknown parameter stream_options.{name}", f"stream_options.{name}",
                     "unknown_parameter")


def check_metadata(metadata: dict[str, Any] | None) -> None:
    """OpenAI's limits: at most 16 string pairs, keys up to 64 characters, values up to 512."""
    if metadata is None:
        return
    if len(metadata) > MAX_METADATA_KEYS:
        raise InvalidRequestError(f"metadata holds at most {MAX_METADATA_KEYS} pairs", param="metadata")
    for key, value in metadata.items():
        if len(key) > MAX_METADATA_KEY:  # param names the object: the key itself could be megabytes
            raise InvalidRequestError(f"metadata keys are at most {MAX_METADATA_KEY} characters; one is "
                                      f"{len(key):,}", param="metadata", code="string_above_max_length")
        if not isinstance(value, str) or len(value) > MAX_METADATA_VALUE:
            raise InvalidRequestError(f"metadata values are strings of at most {MAX_METADATA_VALUE} "
                                      "characters", param=f"metadata.{key}")


def output_format(fmt: dict[str, Any] | None) -> OutputFormat:
    """``text.format`` as the plan's output format (400s name ``text.format...``)."""
    if fmt is None:
        return TEXT
    kind = fmt.get("type")
    if kind == "text":
        return TEXT
    if kind == "json_object":
        return OutputFormat("json_object")
    if kind == "structural_tag":
        return structural_tag(fmt, "text.format")
    if kind != "json_schema":
        raise InvalidRequestError("text.format.type must be text, json_object, json_schema or "
                                  f"structural_tag, not {kind!r}", param="text.format.type")
    for key in fmt:
        if key not in FORMAT_KEYS:
            raise refuse(f"unknown parameter text.format.{key}", f"text.format.{key}", "unknown_parameter")
    name = fmt.get("name")
    if not isinstance(name, str) or not 1 <= len(name) <= 64:
        raise InvalidRequestError("text.format.name must be a string of 1-64 characters",
                                  param="text.format.name", code="missing_required_parameter"
                                  if name is None else "invalid_value")
    schema = fmt.get("schema")
    if not isinstance(schema, dict | bool):
        raise InvalidRequestError("text.format.schema must be a JSON Schema object",
                                  param="text.format.schema",
                                  code="missing_required_parameter" if schema is None else "invalid_value")
    strict = fmt.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise InvalidRequestError("text.format.strict must be a boolean", param="text.format.strict")
    return OutputFormat("json_schema", schema=schema, strict=bool(strict), name=name,
                        param="text.format.schema")


def thinking(body: ResponsesRequest) -> bool | None:
    """``reasoning.effort`` as the template's thinking switch (None: the template's default)."""
    effort = body.reasoning.effort if body.reasoning else None
    if effort is None:
        return None
    return effort not in THINKING_OFF


def reasoning_budget(body: ResponsesRequest) -> int | None:
    """``reasoning.effort`` as thinking tokens allowed (:data:`EFFORT_BUDGETS`; None: no limit)."""
    effort = body.reasoning.effort if body.reasoning else None
    return None if effort is None else EFFORT_BUDGETS[effort]


def sampling_params(body: ResponsesRequest, *, default_max_tokens: int,
                    context_length: int | None = None) -> SamplingParams:
    """SamplingParams from the request (SamplingParams re-validates and raises 400s); a
    ``max_output_tokens`` beyond ``context_length`` runs as the context."""
    asked = body.max_output_tokens or default_max_tokens
    if context_length is not None:
        asked = min(asked, context_length)
    kwargs: dict[str, Any] = {"max_tokens": asked, "seed": body.seed}
    for name in ("temperature", "top_p", "presence_penalty", "frequency_penalty"):
        value = getattr(body, name)
        if value is not None:
            kwargs[name] = value
    return SamplingParams(**kwargs)


def logprobs_wanted(body: ResponsesRequest) -> int | None:
    """Alternatives per token (None: no logprobs): on with the logprobs ``include`` or
    ``top_logprobs`` (which only means something with them)."""
    if LOGPROBS_INCLUDE in (body.include or ()) or body.top_logprobs is not None:
        return body.top_logprobs or 0
    return None


def echo_fields(body: ResponsesRequest, model: str, tools: list[dict[str, Any]], store: bool,
                sampling: SamplingParams) -> dict[str, Any]:
    """The request's settings as the response object repeats them: the values in effect, so a
    setting the request left out reads as the default that ran (``temperature: 1.0``,
    ``top_logprobs: 0``), never null where the Open Responses schema wants a number."""
    fmt = body.text.format if body.text and body.text.format else {"type": "text"}
    effort = body.reasoning.effort if body.reasoning else None
    return {
        "model": model, "instructions": body.instructions, "metadata": dict(body.metadata or {}),
        "max_output_tokens": body.max_output_tokens, "max_tool_calls": body.max_tool_calls,
        "temperature": float(sampling.temperature), "top_p": float(sampling.top_p),
        "presence_penalty": float(sampling.presence_penalty),
        "frequency_penalty": float(sampling.frequency_penalty),
        "top_logprobs": body.top_logprobs or 0,
        "parallel_tool_calls": body.parallel_tool_calls is not False,
        "tool_choice": body.tool_choice if body.tool_choice is not None else ("auto" if tools else "none"),
        "tools": tools, "text": {"format": fmt, "verbosity": "medium"},
        "reasoning": {"effort": effort, "summary": None}, "truncation": body.truncation or "disabled",
        "store": store, "previous_response_id": body.previous_response_id, "background": False,
        "service_tier": "default", "user": body.user, "safety_identifier": body.safety_identifier,
        "prompt_cache_key": body.prompt_cache_key,
    }


async def plan_responses(state: ServerState, body: ResponsesRequest, *, request_id: str,
                         profile_key: str | None, history: list[dict[str, Any]] | None = None,
                         store: bool = True) -> tuple[GenerationPlan, Echo]:
    """The plan of ``body`` and what its response echoes (400/404 errors raised here).
    ``history``: the template turns of the conversation ``previous_response_id`` continues;
    ``store``: whether the response will be kept (the echo says so)."""
    check_unsupported(body)
    check_values(body)
    check_metadata(body.metadata)
    model = check_model(body.model, state.settings.model_names(state.loaded.info.id),
                        aliases=state.settings.model_aliases)
    if body.input is None or (isinstance(body.input, list) and not body.input and not history):
        raise InvalidRequestError("input is required: a string or a list of input items", param="input",
                                  code="missing_required_parameter")
    turns = input_turns(body.instructions, body.input)
    check_input_totals(body.input)
    if history:
        # instructions are not carried over from the response continued (OpenAI's rule): the
        # system turn of this request goes first, then the earlier turns, then this input.
        system = turns[:1] if body.instructions else []
        turns = system + history + turns[len(system):]
    declared = await asyncio.to_thread(read_tools, body.tools) if body.tools else read_tools(None)
    choice, callable_tools = read_choice(body.tool_choice, declared)
    fmt = body.text.format if body.text else None
    output = output_format(fmt)
    if output.kind == "structural_tag" and callable_tools and choice.kind != "none":
        # One mask per request and the tool grammar holds only a JSON answer: refused, not dropped.
        raise InvalidRequestError("text.format (structural_tag) and tools both constrain the output; send "
                                  "one of them, or tool_choice: none", param="text.format",
                                  code="conflicting_constraints")
    # A budget the context can never hold is a ceiling, lowered to what the prompt leaves (and
    # said in a header); one that could fit stays explicit: 400 when this prompt leaves less.
    context = state.loaded.info.context_length
    ceiling = clamped(body.max_output_tokens, context)
    plan = GenerationPlan(
        request_id=request_id, model=model,
        conversation=Conversation(turns, body.chat_template_kwargs or None, thinking=thinking(body)),
        sampling=sampling_params(body, default_max_tokens=state.settings.default_max_tokens,
                                 context_length=context),
        budget=Budget(explicit=body.max_output_tokens is not None and not ceiling, param="max_output_tokens",
                      reasoning_tokens=reasoning_budget(body),
                      reasoning_set=bool(body.reasoning and body.reasoning.effort)),
        id_prefix=ID_PREFIX, output=output,
        tools=ToolUse(callable_tools, choice, body.parallel_tool_calls, format_answer=True,
                      max_calls=body.max_tool_calls),
        logprobs=logprobs_wanted(body), close_on_length=body.afm_close_on_length,
        delivery=Delivery(stream=body.stream, include_usage=True, profile=profile_key),
        paths=PATHS)
    echo = Echo(echo_fields(body, model, declared.echo, store, plan.sampling), declared.custom,
                ignored_tools=declared.ignored, clamped_from=body.max_output_tokens if ceiling else None)
    return plan, echo
