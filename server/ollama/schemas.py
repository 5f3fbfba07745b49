"""The pydantic bodies of Ollama's ``/api/chat``, ``/api/generate`` and ``/api/show``.

Field names and defaults are Ollama's (``stream`` defaults to true).  ``options`` stays a plain
mapping: :func:`server.ollama.adapter.sampling_params` maps, ignores or refuses each key.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from ..limits import Messages, Tools


class OllamaFunctionCall(BaseModel):
    """``message.tool_calls[].function``: arguments are an object, not a JSON string."""

    name: str
    arguments: dict[str, Any] | str | None = None


class OllamaToolCall(BaseModel):
    """One call an assistant message made."""

    function: OllamaFunctionCall
    id: str | None = None


class OllamaMessage(BaseModel):
    """One turn of ``messages``."""

    role: str
    content: str | None = None
    thinking: str | None = None
    images: list[Any] | None = None
    tool_calls: list[OllamaToolCall] | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None


class OllamaBase(BaseModel):
    """What ``/api/chat`` and ``/api/generate`` share."""

    # NaN and Infinity are not JSON numbers (Python's reader takes them, and 1e400 as inf).
    model_config = ConfigDict(allow_inf_nan=False)

    model: Annotated[str, Field(min_length=1)]
    stream: bool = True
    # "" or "json", or a JSON schema.
    format: str | dict[str, Any] | None = None
    options: dict[str, Any] | None = None
    keep_alive: float | str | None = None
    think: bool | str | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Field(strict=True)] | None = None


class OllamaChatRequest(OllamaBase):
    """``POST /api/chat``."""

    messages: Annotated[list[OllamaMessage], Messages] = []
    tools: Annotated[list[dict[str, Any]], Tools] | None = None


class OllamaGenerateRequest(OllamaBase):
    """``POST /api/generate``."""

    prompt: str | None = None
    suffix: str | None = None
    system: str | None = None
    template: str | None = None
    context: list[int] | None = None
    raw: bool = False
    images: list[Any] | None = None


class OllamaShowRequest(BaseModel):
    """``POST /api/show`` (``name`` is the older spelling of ``model``)."""

    model: str | None = None
    name: str | None = None
    verbose: bool | None = None
