"""The Responses API request body, as pydantic reads it at the HTTP boundary.

Only the top level is typed here; input items, tools, ``tool_choice`` and ``text.format`` come
through as JSON values and are checked by the adapter (:mod:`.adapter`), which names the exact
request path of a bad value (``input.2.content.0.type``).  Fields OpenAI documents that this
server does not implement are declared so the adapter can refuse them by name; a field OpenAI
does not document is refused too (``extra="allow"`` keeps it for that check): nothing a client
sends is silently ignored.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..limits import Parts, Tools, check_conversation_items


class ReasoningConfig(BaseModel):
    """``reasoning``: ``effort`` drives the model's thinking switch; summaries are not made."""

    model_config = ConfigDict(extra="allow")

    effort: str | None = None
    summary: str | None = None
    generate_summary: str | None = None


class TextConfig(BaseModel):
    """``text``: the output format (checked by the adapter) and ``verbosity``."""

    model_config = ConfigDict(extra="allow")

    format: dict[str, Any] | None = None
    verbosity: str | None = None


class StreamOptions(BaseModel):
    """``stream_options``: OpenAI's obfuscation padding is never added here."""

    model_config = ConfigDict(extra="allow")

    include_obfuscation: bool | None = None
    include_partial: bool = False  # AFM extension: partial values (server/extensions.py)


class ResponsesRequest(BaseModel):
    """``POST /v1/responses``."""

    # NaN and Infinity are not JSON numbers; unknown fields are kept to be refused by name.
    model_config = ConfigDict(allow_inf_nan=False, extra="allow")

    model: str | None = None
    input: str | Annotated[list[Any], Parts] | None = None
    instructions: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_output_tokens: Annotated[int, Field(strict=True, ge=1)] | None = None
    temperature: Annotated[float, Field(strict=True, ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(strict=True, gt=0, le=1)] | None = None
    presence_penalty: Annotated[float, Field(strict=True, ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Field(strict=True, ge=-2, le=2)] | None = None
    seed: Annotated[int, Field(strict=True)] | None = None
    top_logprobs: Annotated[int, Field(strict=True, ge=0, le=20)] | None = None
    include: list[str] | None = None
    metadata: dict[str, Any] | None = None
    text: TextConfig | None = None
    tools: Annotated[list[Any], Tools] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    reasoning: ReasoningConfig | None = None
    store: bool | None = None
    previous_response_id: str | None = None
    truncation: str | None = None
    background: bool | None = None
    conversation: Any = None
    prompt: Any = None
    max_tool_calls: Annotated[int, Field(ge=1)] | None = None
    service_tier: str | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    # The client's own bookkeeping (Codex CLI's thread and turn ids): accepted, never echoed.
    client_metadata: dict[str, Any] | None = None
    # Server-side context editing (Anthropic's and OpenAI's agent harnesses): accepted and
    # ignored; the conversation is served as sent (truncation: auto drops whole turns).
    context_management: dict[str, Any] | list[Any] | None = None
    # Extensions shared with chat: false lets max_output_tokens cut constrained output
    # mid-value; extra chat-template variables (they win over reasoning.effort's switch).
    afm_close_on_length: bool | None = None
    chat_template_kwargs: dict[str, Any] | None = None

    @field_validator("input", mode="before")
    @classmethod
    def _bounded(cls, value: Any) -> Any:
        check_conversation_items(value, "input")  # items and their parts, before validation
        return value
