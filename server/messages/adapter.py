"""An Anthropic Messages request → the generation plan, and what its response says about it.

The one place the request's fields are read.  Checks that need no model run here, each a typed
400/404 naming the request path (``output_config.format.schema``, ``tools.1.input_schema``,
``messages.0.content.2.type``).  Mapped: ``thinking`` onto the reasoning channel (``enabled``
with ``budget_tokens``: thinking on with that budget; ``adaptive`` and ``between_tools``: on,
no budget; ``disabled``: off), ``tool_choice.disable_parallel_tool_use`` onto one call per
turn, ``output_config.format`` and the older ``output_format`` onto the JSON-schema
constraint (enforced, never ignored).
Accepted and ignored (they cannot change what the model may emit): ``metadata``,
``context_management``, ``output_config.effort``, ``service_tier``, ``cache_control`` (top level
and on blocks), ``diagnostics``, ``inference_geo``, ``speed``,
the ``anthropic-beta`` and ``anthropic-version`` headers.  Hosted tools are left out
(:mod:`.tools`).  ``max_tokens`` is required by Anthropic's API, and agent harnesses send a
large one whatever the model (Claude Code: 64,000): here it is a ceiling, lowered to what the
context leaves after the prompt (``X-AFM-Max-Tokens-Clamped`` says when: :mod:`server.notes`).
Any other field is refused by name.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
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

from ..request import check_model, check_values
from ..state import ServerState
from .content import message_turns
from .schemas import MessagesBase, MessagesRequest
from .tools import read_choice, read_tools

ID_PREFIX = "msg_"
PATHS = RequestPaths(conversation="messages")
THINKING_TYPES = ("enabled", "adaptive", "between_tools", "disabled")
FORMAT_KEYS = frozenset({"type", "schema"})
OUTPUT_CONFIG_KEYS = frozenset({"format", "effort"})
EFFORTS = ("low", "medium", "high", "xhigh", "max")


@dataclass(frozen=True)
class Notes:
    """What the response says about how the request was read: the hosted tools left out."""

    ignored_tools: tuple[str, ...] = ()


def check_unsupported(body: MessagesBase) -> None:
    """400 naming the first field this server would otherwise have to ignore."""
    for name in body.model_extra or {}:
        raise InvalidRequestError(f"{name}: Extra inputs are not permitted (the Messages API has no "
                                  "such field)", param=name, code="unknown_parameter")
    if body.mcp_servers:
        raise InvalidRequestError("mcp_servers is not supported: this server does not connect to MCP "
                                  "servers; declare their tools as client tools", param="mcp_servers",
                                  code="unsupported_parameter")
    if body.container is not None:
        raise InvalidRequestError("container is not supported: this server runs no code execution "
                                  "containers", param="container", code="unsupported_parameter")
    config = body.output_config or {}
    for key in config:
        if key not in OUTPUT_CONFIG_KEYS:
            raise InvalidRequestError(f"unknown parameter output_config.{key}", param=f"output_config.{key}",
                                      code="unknown_parameter")
    effort = config.get("effort")
    if effort is not None and effort not in EFFORTS:
        raise InvalidRequestError(f"output_config.effort must be one of {', '.join(EFFORTS)}",
                                  param="output_config.effort")


def output_format(body: MessagesBase) -> OutputFormat:
    """``output_config.format`` (or the beta's ``output_format``) as the plan's output format:
    always enforced (Anthropic's structured outputs are strict)."""
    config = (body.output_config or {}).get("format")
    if config is not None and body.output_format is not None:
        raise InvalidRequestError("send output_config.format or output_format, not both",
                                  param="output_format")
    fmt, where = (config, "output_config.format") if config is not None else (body.output_format,
                                                                              "output_format")
    if fmt is None:
        return TEXT
    if not isinstance(fmt, dict):
        raise InvalidRequestError(f"{where} must be an object", param=where)
    for key in fmt:
        if key not in FORMAT_KEYS:
            raise InvalidRequestError(f"unknown parameter {where}.{key}", param=f"{where}.{key}",
                                      code="unknown_parameter")
    if fmt.get("type") != "json_schema":
        raise InvalidRequestError(f"{where}.type must be 'json_schema', not {fmt.get('type')!r}",
                                  param=f"{where}.type")
    schema = fmt.get("schema")
    if not isinstance(schema, dict):
        raise InvalidRequestError(f"{where}.schema must be a JSON Schema object", param=f"{where}.schema",
                                  code="missing_required_parameter" if schema is None else "invalid_value")
    return OutputFormat("json_schema", schema=schema, strict=True, param=f"{where}.schema")


def thinking(body: MessagesBase, max_tokens: int | None) -> tuple[bool | None, int | None]:
    """``thinking`` as the template's thinking switch and the reasoning budget (None: the
    template's default; no budget)."""
    spec = body.thinking
    if spec is None:
        return None, None
    kind = spec.get("type")
    if kind not in THINKING_TYPES:
        raise InvalidRequestError(f"thinking.type must be one of {', '.join(THINKING_TYPES)}, not "
                                  f"{kind!r}", param="thinking.type")
    for key in spec:
        if key not in ("type", "budget_tokens", "display"):
            raise InvalidRequestError(f"unknown parameter thinking.{key}", param=f"thinking.{key}",
                                      code="unknown_parameter")
    if kind == "disabled":
        return False, None
    if kind in ("adaptive", "between_tools"):
        return True, None
    budget = spec.get("budget_tokens")
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
        raise InvalidRequestError("thinking.budget_tokens must be a positive integer with type 'enabled'",
                                  param="thinking.budget_tokens",
                                  code="missing_required_parameter" if budget is None else "invalid_value")
    if max_tokens is not None and budget >= max_tokens:
        raise InvalidRequestError(f"thinking.budget_tokens ({budget}) must be less than max_tokens "
                                  f"({max_tokens})", param="thinking.budget_tokens")
    return True, budget


def sampling_params(body: MessagesRequest, max_tokens: int) -> SamplingParams:
    """SamplingParams from the request (SamplingParams re-validates and raises 400s)."""
    kwargs: dict[str, Any] = {"max_tokens": max_tokens, "stop": tuple(body.stop_sequences or ())}
    for name in ("temperature", "top_p", "top_k"):
        value = getattr(body, name)
        if value is not None:
            kwargs[name] = value
    try:
        return SamplingParams(**kwargs)
    except InvalidRequestError as err:
        if err.param == "stop":
            err.param = "stop_sequences"
        raise


async def plan_messages(state: ServerState, body: MessagesBase, *, request_id: str,
                        profile_key: str | None = None) -> tuple[GenerationPlan, Notes]:
    """The plan of ``body`` and the notes its response carries (400/404 errors raised here).
    A :class:`~.schemas.CountTokensRequest` is planned as a message of one token."""
    check_unsupported(body)
    check_values(body)
    settings = state.settings
    model = check_model(body.model, settings.model_names(state.loaded.info.id),
                        aliases=settings.model_aliases)
    turns = message_turns(body.system, body.messages)
    declared = await asyncio.to_thread(read_tools, body.tools) if body.tools else read_tools(None)
    choice, parallel = read_choice(body.tool_choice, declared)
    request = body if isinstance(body, MessagesRequest) else None
    asked = request.max_tokens if request is not None else 1
    switch, reasoning_budget = thinking(body, asked if request is not None else None)
    # A ceiling, lowered to what the prompt leaves (the route says when it was).
    context = state.loaded.info.context_length
    plan = GenerationPlan(
        request_id=request_id, model=model,
        conversation=Conversation(turns, thinking=switch),
        sampling=sampling_params(request, min(asked, context)) if request is not None
        else SamplingParams(max_tokens=1),
        budget=Budget(explicit=False, param="max_tokens", reasoning_tokens=reasoning_budget,
                      reasoning_set=reasoning_budget is not None),
        id_prefix=ID_PREFIX, output=output_format(body),
        tools=ToolUse(declared.defs, choice, parallel, format_answer=True),
        delivery=Delivery(stream=bool(request and request.stream), include_usage=True, profile=profile_key),
        paths=PATHS)
    return plan, Notes(declared.ignored)
