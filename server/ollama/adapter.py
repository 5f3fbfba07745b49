"""Ollama's ``/api/chat`` and ``/api/generate`` requests → the generation plan.

``format`` is the output constraint (``"json"``: any JSON object; a schema: an instance of it,
exact or refused, never silently dropped), ``options`` the sampling values: each key Ollama
defines is mapped, ignored because it only tunes resources (``num_ctx``, ``num_thread``...), or
refused with a 400 naming it when it would change the output in a way this engine cannot
reproduce (``mirostat``, ``typical_p``...).  An unknown key is refused too.  ``/api/generate``
applies the chat template to its prompt unless ``raw`` (then the prompt is read as
``/v1/completions`` reads one).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
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

from ..constraint_fields import read_field
from ..model_alias import ModelAlias, resolve_alias
from ..request import check_model, check_values
from ..state import ServerState
from .schemas import OllamaBase, OllamaChatRequest, OllamaGenerateRequest, OllamaMessage

ID_PREFIX = "ollama-"
CHAT_PATHS = RequestPaths(conversation="messages")
GENERATE_PATHS = RequestPaths(conversation="prompt")

# options keys → SamplingParams fields.
MAPPED = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
          "seed": "seed", "repeat_penalty": "repetition_penalty"}
SUPPORTED = tuple(sorted({*MAPPED, "num_predict", "stop", "repeat_last_n"}))
# Resource and loading knobs: they change how Ollama runs a model, not what it says.
IGNORED = frozenset({"numa", "num_ctx", "num_batch", "num_gpu", "main_gpu", "low_vram", "f16_kv",
                     "logits_all", "vocab_only", "use_mmap", "use_mlock", "embedding_only",
                     "num_thread", "num_keep"})
# Sampling knobs this engine does not have, with the value that leaves sampling unchanged.
NEUTRAL: dict[str, Any] = {"tfs_z": 1.0, "typical_p": 1.0, "presence_penalty": 0.0,
                           "frequency_penalty": 0.0, "mirostat": 0, "penalize_newline": False}
# Only read when their switch (mirostat) is on, which is refused.
INERT = frozenset({"mirostat_tau", "mirostat_eta"})
# SamplingParams field → the option that set it, for errors.
OPTION_OF = {field: key for key, field in MAPPED.items()} | {"max_tokens": "num_predict",
                                                             "repetition_context": "repeat_last_n"}


def ollama_model(requested: str, served: tuple[str, ...], aliases: Sequence[ModelAlias] = ()) -> str:
    """The served name ``requested`` names; Ollama's clients add ``:latest`` to a bare name
    (and ``--model-alias`` patterns match either spelling)."""
    if requested not in served and requested.endswith(":latest"):
        bare = requested[: -len(":latest")]
        if bare in served:
            return bare
        if resolve_alias(requested, aliases) is None and resolve_alias(bare, aliases) is not None:
            requested = bare
    return check_model(requested, served, listing="GET /api/tags", aliases=aliases)


def sampling_params(options: dict[str, Any] | None, *, default_max_tokens: int,
                    context_length: int) -> tuple[SamplingParams, bool]:
    """``options`` as SamplingParams, and whether ``num_predict`` set the budget explicitly
    (Ollama's -1 / -2, "until done" / "fill the context", leave it to the context).  Ollama's
    ``repeat_last_n`` is the penalty's window (0: no penalty, -1: the whole context) and a
    negative ``seed`` a random one."""
    kwargs: dict[str, Any] = {"max_tokens": default_max_tokens}
    explicit = no_penalty = False
    for key, value in (options or {}).items():
        if value is None:
            continue
        where = f"options.{key}"
        if key == "seed" and isinstance(value, int) and value < 0:
            kwargs["seed"] = None  # Ollama's -1: a random seed
        elif key in MAPPED:
            kwargs[MAPPED[key]] = value
        elif key == "num_predict":
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidRequestError(f"{where} must be an integer, got {value!r}", param=where,
                                          code="invalid_value")
            if value == 0 or value < -2:
                raise InvalidRequestError(f"{where} must be positive, or -1 / -2 for no limit; got {value}",
                                          param=where, code="invalid_value")
            if value > 0:
                kwargs["max_tokens"], explicit = value, True
        elif key == "repeat_last_n":
            if value == 0:
                no_penalty = True
            else:  # SamplingParams checks the value
                kwargs["repetition_context"] = context_length if value == -1 else value
        elif key == "stop":
            # a list as the tuple SamplingParams holds; any other value is its to refuse
            kwargs["stop"] = (value,) if isinstance(value, str) else tuple(value) if isinstance(value, list) \
                else value
        elif key in IGNORED or key in INERT:
            continue
        elif key in NEUTRAL:
            if value != NEUTRAL[key]:
                raise InvalidRequestError(
                    f"{where}={value!r} is not supported: this server has no {key} sampling; omit it "
                    f"or send {NEUTRAL[key]!r}", param=where, code="unsupported_value")
        else:
            raise InvalidRequestError(f"{where} is not an option this server knows; supported: "
                                      f"{', '.join(SUPPORTED)}",
                                      param=where, code="unsupported_parameter")
    if no_penalty:
        kwargs["repetition_penalty"] = 1.0
    try:
        return SamplingParams(**kwargs), explicit
    except InvalidRequestError as err:  # named as the option the caller sent
        key = OPTION_OF.get(err.param or "", err.param)
        err.param = f"options.{key}"
        err.message = f"options.{key}: {err.message}"
        raise


def output_format(fmt: str | dict[str, Any] | None) -> OutputFormat:
    """``format``: "" or absent is text; "json" any JSON object, an object a JSON schema, both
    strict as every dialect constraint (:func:`server.constraint_fields.read_field`)."""
    if fmt is None or fmt == "":
        return TEXT
    return read_field("json_or_schema", fmt, "format")


def thinking(think: bool | str | None) -> bool | None:
    """``think``: a bool, or a level ("low", "medium", "high") that turns thinking on."""
    if think is None or isinstance(think, bool):
        return think
    return True


def logprobs_wanted(body: OllamaBase) -> int | None:
    """``logprobs`` / ``top_logprobs`` (0-20) as the plan's count (None: off)."""
    top = body.top_logprobs
    if top is not None and not 0 <= top <= MAX_TOP_LOGPROBS:
        raise InvalidRequestError(f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}, got {top}",
                                  param="top_logprobs", code="invalid_value")
    if not body.logprobs:
        return None
    return top or 0


def chat_messages(messages: list[OllamaMessage]) -> list[dict[str, Any]]:
    """Ollama messages as chat-template dicts (call arguments stay objects; images refused)."""
    out: list[dict[str, Any]] = []
    for i, msg in enumerate(messages):
        if msg.images:
            raise InvalidRequestError(f"messages[{i}] has images; this server reads text only",
                                      param=f"messages.{i}.images", code="unsupported_content")
        item: dict[str, Any] = {"role": "system" if msg.role == "developer" else msg.role,
                                "content": msg.content or ""}
        if msg.tool_calls:
            item["tool_calls"] = [{"id": c.id or f"call_{i}_{j}", "type": "function",
                                   "function": {"name": c.function.name,
                                                "arguments": c.function.arguments or {}}}
                                  for j, c in enumerate(msg.tool_calls)]
        if msg.role == "tool":
            if msg.tool_name:
                item["name"] = msg.tool_name
            item["tool_call_id"] = msg.tool_call_id or msg.tool_name or f"call_{i}"
        out.append(item)
    return out


def _plan(state: ServerState, body: OllamaBase, conversation: Conversation, *, request_id: str,
          paths: RequestPaths, tools: ToolUse | None = None) -> GenerationPlan:
    model = ollama_model(body.model, state.settings.model_names(state.loaded.info.id),
                         state.settings.model_aliases)
    params, explicit = sampling_params(body.options, default_max_tokens=state.settings.default_max_tokens,
                                       context_length=state.loaded.info.context_length)
    return GenerationPlan(
        request_id=request_id, model=model, conversation=conversation, sampling=params,
        budget=Budget(explicit=explicit, param="options.num_predict"), id_prefix=ID_PREFIX,
        output=output_format(body.format), tools=tools or ToolUse(), logprobs=logprobs_wanted(body),
        delivery=Delivery(stream=body.stream), paths=paths)


async def plan_ollama_chat(state: ServerState, body: OllamaChatRequest, *, request_id: str) -> GenerationPlan:
    """The plan of an ``/api/chat`` body (400/404 errors raised here)."""
    check_values(body)
    if not body.messages:
        raise InvalidRequestError("messages is empty: send at least one message", param="messages",
                                  code="missing_required_parameter")
    messages = chat_messages(body.messages)
    if body.tools and body.format not in (None, ""):
        # One mask serves a request, as for the constraint fields on chat (never one dropped).
        raise InvalidRequestError("format and tools both constrain the output; one mask serves a "
                                  "request, so send one of them", param="tools",
                                  code="conflicting_constraints")
    tools = await asyncio.to_thread(parse_tools, body.tools) if body.tools else ()
    use = ToolUse(tools, parse_choice("auto" if tools else None, tools))
    return _plan(state, body, Conversation(messages, thinking=thinking(body.think)),
                 request_id=request_id, paths=CHAT_PATHS, tools=use)


def plan_ollama_generate(state: ServerState, body: OllamaGenerateRequest, *,
                         request_id: str) -> GenerationPlan:
    """The plan of an ``/api/generate`` body with a prompt (400/404 errors raised here)."""
    check_values(body)
    for field in ("suffix", "template"):
        if getattr(body, field):
            raise InvalidRequestError(f"{field} is not supported: the model's own chat template is "
                                      "applied (or none, with raw: true)", param=field,
                                      code="unsupported_parameter")
    if body.context:
        raise InvalidRequestError("context (token ids of an earlier answer) is not supported: send "
                                  "the conversation to /api/chat instead", param="context",
                                  code="unsupported_parameter")
    if body.images:
        raise InvalidRequestError("images are not supported: this server reads text only",
                                  param="images", code="unsupported_content")
    prompt = body.prompt or ""
    if body.raw:
        if body.system:
            raise InvalidRequestError("system needs the chat template; with raw: true write it into "
                                      "the prompt", param="system", code="unsupported_parameter")
        conversation = Conversation.raw(prompt)
    else:
        messages = ([{"role": "system", "content": body.system}] if body.system else [])
        conversation = Conversation([*messages, {"role": "user", "content": prompt}],
                                    thinking=thinking(body.think))
    return _plan(state, body, conversation, request_id=request_id, paths=GENERATE_PATHS)
