"""The pydantic body of ``POST /v1/completions`` (OpenAI's legacy text completions, with the
fields vLLM adds: ``top_k``, ``min_p``, ``repetition_penalty``, ``response_format``)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from ..schemas import ResponseFormat, StreamOptions


class CompletionRequest(BaseModel):
    """``POST /v1/completions``."""

    # NaN and Infinity are not JSON numbers (Python's reader takes them, and 1e400 as inf).
    # Unknown fields are kept for server.constraint_fields (other servers' constraint fields).
    model_config = ConfigDict(allow_inf_nan=False, extra="allow")

    # A string, or a list of one; token-id prompts are refused by the adapter with a reason.
    prompt: str | list[str] | list[int] | list[list[int]]
    model: str | None = None
    suffix: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    # OpenAI's and vLLM's default for text completions.
    max_tokens: Annotated[int, Field(strict=True, ge=1)] | None = None
    temperature: Annotated[float, Field(strict=True, ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(strict=True, gt=0, le=1)] | None = None
    top_k: Annotated[int, Field(strict=True, ge=0)] | None = None
    min_p: Annotated[float, Field(strict=True, ge=0, lt=1)] | None = None
    repetition_penalty: Annotated[float, Field(strict=True, gt=0)] | None = None
    seed: Annotated[int, Field(strict=True)] | None = None
    stop: str | list[str] | None = None
    n: Annotated[int, Field(strict=True, ge=1)] | None = None
    best_of: Annotated[int, Field(strict=True, ge=1)] | None = None
    # The legacy integer form: how many alternatives per token (0-20), the sampled token's
    # logprob always included.
    logprobs: Annotated[int, Field(strict=True)] | None = None
    echo: bool = False
    response_format: ResponseFormat | None = None
    afm_close_on_length: bool | None = None
    # As vLLM: special tokens (an end-of-turn the model wrote) have no text unless false.
    skip_special_tokens: bool = True
    user: str | None = None


class CompletionChoiceModel(BaseModel):
    """One choice of a text completion (documentation only)."""

    index: int
    text: str
    logprobs: dict[str, Any] | None = None
    finish_reason: str | None


class CompletionResponse(BaseModel):
    """A non-streaming ``text_completion`` (documentation only)."""

    id: str
    object: str
    created: int
    model: str
    choices: list[CompletionChoiceModel]
    usage: dict[str, int]
