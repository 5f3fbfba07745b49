"""Anthropic's Messages API request bodies, as pydantic reads them at the HTTP boundary.

Only the top level is typed; messages' content blocks, tools, ``tool_choice``, ``thinking`` and
the output format come through as JSON values and are read by :mod:`.content`, :mod:`.tools`
and :mod:`.adapter`, which name the exact request path of a bad value
(``messages.2.content.0.type``).  Fields that cannot change what the model may emit
(``metadata``, ``context_management``, ``output_config.effort``, ``service_tier``) are declared
and ignored (docs/protocol.md lists them); a field Anthropic does not document is refused by
name (``extra="allow"`` keeps it for that check), as Anthropic's API refuses it.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..limits import Messages, Tools, check_conversation_items


class MessagesBase(BaseModel):
    """What ``POST /v1/messages`` and ``POST /v1/messages/count_tokens`` share: the prompt."""

    # NaN and Infinity are not JSON numbers; unknown fields are kept to be refused by name.
    model_config = ConfigDict(allow_inf_nan=False, extra="allow")

    model: str | None = None
    messages: Annotated[list[Any], Messages]
    system: str | list[Any] | None = None
    tools: Annotated[list[Any], Tools] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None
    # {"format": {"type": "json_schema", "schema": ...}, "effort": ...}
    output_config: dict[str, Any] | None = None
    # The older structured-outputs beta's field: {"type": "json_schema", "schema": ...}.
    output_format: dict[str, Any] | None = None
    # Accepted and ignored: they do not change what the model may emit (docs/protocol.md).
    context_management: dict[str, Any] | None = None
    mcp_servers: list[Any] | None = None
    container: Any = None

    @field_validator("messages", mode="before")
    @classmethod
    def _bounded(cls, value: Any) -> Any:
        check_conversation_items(value)  # messages and their blocks, before validation
        return value


class MessagesRequest(MessagesBase):
    """``POST /v1/messages``."""

    max_tokens: Annotated[int, Field(strict=True, ge=1)]
    stream: bool = False
    stop_sequences: list[str] | None = None
    # Anthropic's ranges: temperature 0-1, top_p 0-1, top_k >= 0.
    temperature: Annotated[float, Field(strict=False, ge=0, le=1)] | None = None
    top_p: Annotated[float, Field(strict=False, gt=0, le=1)] | None = None
    top_k: Annotated[int, Field(strict=True, ge=0)] | None = None
    # {"user_id": ...}: accepted, never used (the tenant comes from the API key).
    metadata: dict[str, Any] | None = None
    service_tier: str | None = None
    # Newer SDK fields, accepted and ignored: prompt-cache markers, cache diagnostics, the region
    # and speed tier of Anthropic's own fleet.
    cache_control: dict[str, Any] | None = None
    diagnostics: dict[str, Any] | None = None
    inference_geo: str | None = None
    speed: str | None = None


class CountTokensRequest(MessagesBase):
    """``POST /v1/messages/count_tokens``: the prompt of a message, without its sampling."""
