"""A Chat Completions request → the generation plan: the one place its fields are read.

Checks that need no model run here, in the order the wire has always reported them (values no
engine can take, ``n``, the model name, the messages, the tools and ``tool_choice``, sampling,
logprobs); each raises a typed 400/404 naming the request path.  The result is protocol-neutral
(:class:`afm_struct.serving.plan.GenerationPlan`): the core never sees this request again.
"""

from __future__ import annotations

import asyncio
from typing import Any

from afm_struct.decoding.logprobs import MAX_TOP_LOGPROBS
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
from afm_struct.tools import parse_choice, parse_tools

from ..constraint_fields import structural_tag
from ..constraint_plan import dialect_output
from ..request import check_model, check_values
from ..schemas import (
    ChatCompletionRequest,
    ChatMessage,
    ResponseFormatJsonObject,
    ResponseFormatJsonSchema,
    ResponseFormatStructuralTag,
    ResponseFormatText,
)
from ..state import ServerState
from .chunks import ID_PREFIX

# Chat names the conversation as the engine does.
PATHS = RequestPaths(conversation="messages")
SCHEMA_PARAM = "response_format.json_schema.schema"


async def plan_chat(state: ServerState, body: ChatCompletionRequest, *, request_id: str,
                    profile_key: str | None) -> GenerationPlan:
    """The plan of ``body`` (400/404 errors raised here; the tools' schema checks run off the
    event loop)."""
    check_values(body)
    check_n(body.n)
    model = check_model(body.model, state.settings.model_names(state.loaded.info.id),
                        aliases=state.settings.model_aliases)
    messages = template_messages(body.messages)
    # Tools and tool_choice are parsed and checked once, here (400s naming the parameter).
    tools = await asyncio.to_thread(parse_tools, body.tools) if body.tools else ()
    choice = parse_choice(body.tool_choice, tools)
    params = sampling_params(body, default_max_tokens=state.settings.default_max_tokens)
    logprobs = logprobs_wanted(body)
    return GenerationPlan(
        request_id=request_id, model=model,
        conversation=Conversation(messages, body.chat_template_kwargs or None),
        sampling=params,
        budget=Budget(explicit=body.max_completion_tokens is not None or body.max_tokens is not None,
                      param="max_completion_tokens" if body.max_completion_tokens else "max_tokens",
                      reasoning_tokens=body.max_reasoning_tokens,
                      reasoning_set=body.max_reasoning_tokens is not None),
        id_prefix=ID_PREFIX,
        output=await dialect_output(body) or output_format(body.response_format),
        tools=ToolUse(tools, choice, body.parallel_tool_calls, format_answer=True),
        logprobs=logprobs, close_on_length=body.afm_close_on_length,
        skip_special_tokens=body.skip_special_tokens,
        delivery=Delivery(stream=body.stream,
                          include_usage=bool(body.stream_options and body.stream_options.include_usage),
                          profile=profile_key),
        paths=PATHS)


def output_format(fmt: ResponseFormatText | ResponseFormatJsonObject | ResponseFormatJsonSchema
                  | ResponseFormatStructuralTag | None) -> OutputFormat:
    """``response_format`` as the plan's output format (``param``: where its schema sits)."""
    if isinstance(fmt, ResponseFormatStructuralTag):
        return structural_tag({"type": fmt.type, **(fmt.model_extra or {})}, "response_format")
    if isinstance(fmt, ResponseFormatJsonObject):
        return OutputFormat("json_object")
    if isinstance(fmt, ResponseFormatJsonSchema):
        spec = fmt.json_schema
        return OutputFormat("json_schema", schema=spec.schema_ if spec.schema_ is not None else True,
                            strict=bool(spec.strict), name=spec.name, param=SCHEMA_PARAM)
    return TEXT


def check_n(n: int | None) -> None:
    """400 for n > 1 (one choice per request)."""
    if n is not None and n != 1:
        raise InvalidRequestError(f"n={n} is not supported: this server returns exactly one choice "
                                  "per request; send n=1 or omit it", param="n", code="unsupported_value")


def message_text(msg: ChatMessage, index: int) -> str | None:
    """A message's content as text (text parts joined); other part types are refused."""
    if msg.content is None or isinstance(msg.content, str):
        return msg.content
    texts = []
    for j, part in enumerate(msg.content):
        if part.type != "text" or part.text is None:
            raise InvalidRequestError(
                f"messages[{index}].content[{j}] has type {part.type!r}; only text parts are supported",
                param=f"messages.{index}.content.{j}.type", code="unsupported_content")
        texts.append(part.text)
    return "".join(texts)


def template_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """Messages as chat-template dicts.

    ``developer`` is rendered as ``system``: few templates know the newer role and OpenAI
    defines it as the system role for newer models.
    """
    out: list[dict[str, Any]] = []
    for i, msg in enumerate(messages):
        text = message_text(msg, i)
        if msg.role == "tool" and not msg.tool_call_id:
            raise InvalidRequestError(f"messages[{i}] has role 'tool' but no tool_call_id",
                                      param=f"messages.{i}.tool_call_id", code="missing_required_parameter")
        if msg.role != "assistant" and text is None:
            raise InvalidRequestError(f"messages[{i}] ({msg.role}) has no content",
                                      param=f"messages.{i}.content", code="missing_required_parameter")
        item: dict[str, Any] = {"role": "system" if msg.role == "developer" else msg.role,
                                "content": text or ""}
        if msg.name:
            item["name"] = msg.name
        if msg.tool_calls:
            item["tool_calls"] = [tc.model_dump() for tc in msg.tool_calls]
        if msg.tool_call_id:
            item["tool_call_id"] = msg.tool_call_id
        out.append(item)
    return out


def sampling_params(req: ChatCompletionRequest, *, default_max_tokens: int) -> SamplingParams:
    """SamplingParams from the request (SamplingParams re-validates and raises 400s)."""
    stop = req.stop
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    max_tokens = req.max_completion_tokens or req.max_tokens or default_max_tokens
    kwargs: dict[str, Any] = {"max_tokens": max_tokens, "stop": stops, "seed": req.seed}
    for name in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty"):
        value = getattr(req, name)
        if value is not None:
            kwargs[name] = value
    return SamplingParams(**kwargs)


def logprobs_wanted(req: ChatCompletionRequest) -> int | None:
    """How many alternatives per token the request wants (None: no logprobs), as OpenAI checks:
    ``top_logprobs`` needs ``logprobs: true`` and lies in 0-20."""
    top = req.top_logprobs
    if top is not None and not 0 <= top <= MAX_TOP_LOGPROBS:
        raise InvalidRequestError(f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}, got {top}",
                                  param="top_logprobs", code="invalid_value")
    if not req.logprobs:
        if top is not None:
            raise InvalidRequestError("top_logprobs needs logprobs: true", param="top_logprobs",
                                      code="invalid_value")
        return None
    return top or 0
