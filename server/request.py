"""Pydantic request → engine values: chat messages and sampling parameters.

Admission checks that need no model live here (values no engine can take, n, model name, content
parts, logprobs); they raise typed 400/404 errors that carry the offending parameter.  Tools and
``tool_choice`` are checked where they are parsed, :mod:`afm_struct.tools.definitions`.
"""

from __future__ import annotations

from typing import Any

from afm_struct.decoding.logprobs import MAX_TOP_LOGPROBS
from afm_struct.decoding.sampling import SamplingParams
from afm_struct.errors import InvalidRequestError, NotFoundError
from afm_struct.text.values import check_values as check_json_values

from .schemas import ChatCompletionRequest, ChatMessage


def check_values(body: ChatCompletionRequest) -> None:
    """400 ``invalid_value`` for a value no part of the engine can take (a lone UTF-16
    surrogate, a non-finite number), wherever it is in the request, with ``param`` = its path
    (:func:`afm_struct.text.values.check_values`; every string, key and number, once)."""
    check_json_values(body.model_dump(by_alias=True, exclude_unset=True))


def check_model(requested: str | None, served: tuple[str, ...]) -> str:
    """The name to echo as ``model``: ``requested`` if it is one of ``served`` (the first when
    omitted); 404 otherwise, naming what to send."""
    if requested is None:
        return served[0]
    if requested not in served:
        names = " or ".join(repr(n) for n in served)
        raise NotFoundError(f"model {requested!r} is not served here; send {names} (GET /v1/models)",
                            param="model", code="model_not_found")
    return requested


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
