"""A ``/v1/completions`` request → the generation plan: the one place its fields are read.

The prompt is raw (:meth:`Conversation.raw`): no chat template, no thinking split, and
special-token text in it read as those tokens, since the caller writes the whole prompt (what
a harness comparing constrained and free decoding on identical token prefixes needs).  Checks
that need no model run here and raise typed 400/404 errors naming the request path.
"""

from __future__ import annotations

from typing import Any

from afm_struct.decoding.logprobs import MAX_TOP_LOGPROBS
from afm_struct.decoding.sampling import SamplingParams
from afm_struct.errors import InvalidRequestError
from afm_struct.serving.plan import Budget, Conversation, Delivery, GenerationPlan, RequestPaths

from ..chat.adapter import check_n, output_format
from ..constraint_plan import dialect_output
from ..request import check_model, check_values
from ..state import ServerState
from .encoder import ID_PREFIX
from .schemas import CompletionRequest

PATHS = RequestPaths(conversation="prompt")
# OpenAI's and vLLM's default completion budget for text completions.
DEFAULT_MAX_TOKENS = 16


async def plan_completion(state: ServerState, body: CompletionRequest, *, request_id: str,
                          profile_key: str | None) -> GenerationPlan:
    """The plan of ``body`` (400/404 errors raised here).  The output constraint is read as on
    chat: ``response_format`` or one of the other servers' constraint fields
    (:mod:`server.constraint_fields`), enforced or refused."""
    check_values(body)
    check_n(body.n)
    check_unsupported(body)
    model = check_model(body.model, state.settings.model_names(state.loaded.info.id),
                        aliases=state.settings.model_aliases)
    prompt = prompt_text(body.prompt)
    return GenerationPlan(
        request_id=request_id, model=model, conversation=Conversation.raw(prompt),
        sampling=sampling_params(body),
        budget=Budget(explicit=body.max_tokens is not None, param="max_tokens"),
        id_prefix=ID_PREFIX, output=await dialect_output(body) or output_format(body.response_format),
        logprobs=logprobs_wanted(body), close_on_length=body.afm_close_on_length,
        skip_special_tokens=body.skip_special_tokens,
        delivery=Delivery(stream=body.stream,
                          include_usage=bool(body.stream_options and body.stream_options.include_usage),
                          profile=profile_key),
        paths=PATHS)


def prompt_text(prompt: str | list[str] | list[int] | list[list[int]]) -> str:
    """The one prompt: a string, or a list holding one string.  Several prompts (one choice
    each) and token-id prompts are refused, naming what to send."""
    if isinstance(prompt, str):
        return prompt
    if prompt and all(isinstance(p, str) for p in prompt):
        if len(prompt) == 1:
            return prompt[0]  # type: ignore[return-value]
        raise InvalidRequestError(
            f"prompt holds {len(prompt)} prompts; this server completes one prompt per request: "
            "send a string or a list of one string", param="prompt", code="unsupported_value")
    if not prompt:
        raise InvalidRequestError("prompt is an empty list: send a string", param="prompt",
                                  code="invalid_value")
    raise InvalidRequestError("token-id prompts are not supported: send the prompt as text "
                              "(special-token text in it is read as those tokens)",
                              param="prompt", code="unsupported_value")


def check_unsupported(body: CompletionRequest) -> None:
    """400 for fields this server cannot honour, rather than answering as if they were."""
    if body.suffix:
        raise InvalidRequestError("suffix (insertion) is not supported: send the prompt only",
                                  param="suffix", code="unsupported_value")
    if body.best_of is not None and body.best_of != 1:
        raise InvalidRequestError(f"best_of={body.best_of} is not supported: this server generates "
                                  "one completion per request; send best_of=1 or omit it",
                                  param="best_of", code="unsupported_value")
    if body.echo and body.logprobs is not None:
        raise InvalidRequestError("echo with logprobs would need the prompt's logprobs, which this "
                                  "server does not compute; drop one of them", param="echo",
                                  code="unsupported_value")


def sampling_params(body: CompletionRequest) -> SamplingParams:
    """SamplingParams from the request (SamplingParams re-validates and raises 400s)."""
    stop = body.stop
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    kwargs: dict[str, Any] = {"max_tokens": body.max_tokens or DEFAULT_MAX_TOKENS, "stop": stops,
                              "seed": body.seed}
    for name in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty"):
        value = getattr(body, name)
        if value is not None:
            kwargs[name] = value
    return SamplingParams(**kwargs)


def logprobs_wanted(body: CompletionRequest) -> int | None:
    """The legacy integer ``logprobs``: None (off) or how many alternatives per token (0-20)."""
    n = body.logprobs
    if n is not None and not 0 <= n <= MAX_TOP_LOGPROBS:
        raise InvalidRequestError(f"logprobs must be between 0 and {MAX_TOP_LOGPROBS}, got {n}",
                                  param="logprobs", code="invalid_value")
    return n
