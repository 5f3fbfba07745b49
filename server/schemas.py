"""Pydantic models of the HTTP boundary (the only place pydantic is used).

Requests follow OpenAI's chat-completions shape.  Unknown fields are kept (``extra="allow"``) for
:mod:`server.constraint_fields`, which enforces or refuses other servers' constraint fields and
ignores the rest, so clients written for other servers keep working.  Response models exist
for the OpenAPI document; responses themselves are built as plain dicts by :mod:`server.sse`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .limits import Messages, Parts, Tools, check_conversation_items

Role = Literal["system", "developer", "user", "assistant", "tool"]


class ContentPart(BaseModel):
    """One part of a message's content; only ``text`` parts are supported."""

    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None


class FunctionCall(BaseModel):
    """A function call in an assistant message of the history."""

    name: str
    arguments: str = ""


class ToolCall(BaseModel):
    """A tool call in an assistant message of the history."""

    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    """A message of the conversation."""

    role: Role
    content: str | Annotated[list[ContentPart], Parts] | None = None
    name: str | None = None
    tool_calls: Annotated[list[ToolCall], Parts] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None


class FunctionDefinition(BaseModel):
    """A function the model may call."""

    model_config = ConfigDict(extra="allow")  # checked: server.constraint_fields

    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(BaseModel):
    """A tool definition (functions only)."""

    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(BaseModel):
    """The function named by a ``tool_choice`` object."""

    name: str


class NamedToolChoice(BaseModel):
    """``tool_choice`` forcing one function."""

    type: Literal["function"] = "function"
    function: NamedFunction


class JsonSchemaSpec(BaseModel):
    """``response_format.json_schema``."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")  # checked: server.constraint_fields

    name: Annotated[str, Field(min_length=1, max_length=64)]
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormatText(BaseModel):
    """Free text (the default)."""

    model_config = ConfigDict(extra="allow")  # checked: server.constraint_fields

    type: Literal["text"]


class ResponseFormatJsonObject(BaseModel):
    """Any JSON object; with ``schema`` (llama.cpp's form) an instance of that schema."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    type: Literal["json_object"]
    schema_: dict[str, Any] | bool | None = Field(default=None, alias="schema")


class ResponseFormatJsonSchema(BaseModel):
    """JSON conforming to a schema."""

    model_config = ConfigDict(extra="allow")

    type: Literal["json_schema"]
    json_schema: JsonSchemaSpec


class ResponseFormatStructuralTag(BaseModel):
    """Free text with tagged sections (vLLM's ``structures`` + ``triggers`` or xgrammar's
    ``format``): every other key is read, and refused if unknown, by
    :func:`afm_struct.grammar.structural_tag.read_structural_tag`."""

    model_config = ConfigDict(extra="allow")

    type: Literal["structural_tag"]


ResponseFormat = Annotated[
    ResponseFormatText | ResponseFormatJsonObject | ResponseFormatJsonSchema | ResponseFormatStructuralTag,
    Field(discriminator="type"),
]


class StreamOptions(BaseModel):
    """``stream_options``; ``include_partial`` and ``include_token_details`` are AFM
    extensions (server/extensions.py)."""

    include_usage: bool = False
    include_partial: bool = False
    include_token_details: bool = False


class ChatCompletionRequest(BaseModel):
    """``POST /v1/chat/completions``."""

    # NaN and Infinity are not JSON numbers (Python's reader takes them, and 1e400 as inf).
    # Unknown fields are kept for server.constraint_fields (other servers' constraint fields).
    model_config = ConfigDict(allow_inf_nan=False, extra="allow")

    messages: Annotated[list[ChatMessage], Field(min_length=1), Messages]

    @field_validator("messages", mode="before")
    @classmethod
    def _bounded(cls, value: Any) -> Any:
        check_conversation_items(value)  # before any message is validated
        return value

    model: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: Annotated[int, Field(strict=True, ge=1)] | None = None
    max_completion_tokens: Annotated[int, Field(strict=True, ge=1)] | None = None
    # Extension: thinking tokens allowed before the block is left (the close tag forced).
    max_reasoning_tokens: Annotated[int, Field(strict=True, ge=0)] | None = None
    temperature: Annotated[float, Field(strict=True, ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(strict=True, gt=0, le=1)] | None = None
    top_k: Annotated[int, Field(strict=True, ge=0)] | None = None
    min_p: Annotated[float, Field(strict=True, ge=0, lt=1)] | None = None
    repetition_penalty: Annotated[float, Field(strict=True, gt=0)] | None = None
    seed: Annotated[int, Field(strict=True)] | None = None
    stop: str | list[str] | None = None
    n: Annotated[int, Field(strict=True, ge=1)] | None = None
    response_format: ResponseFormat | None = None
    tools: Annotated[list[Tool], Tools] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    # Token logprobs of content and tool-call arguments; top_logprobs (0-20) alternatives per
    # token, only with logprobs: true (checked in server.chat.adapter.logprobs_wanted).
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Field(strict=True)] | None = None
    # Extension: false lets max_tokens cut constrained output mid-value (default: the server's
    # setting, on unless started with --no-close-on-length).
    afm_close_on_length: bool | None = None
    # As vLLM's: false shows the text of special tokens and unread markup the model samples.
    skip_special_tokens: bool = True
    # Extra chat-template variables, as vLLM and SGLang take them (Qwen3: {"enable_thinking":
    # false} renders an empty, closed thinking block, so the answer starts at once).
    chat_template_kwargs: dict[str, Any] | None = None


# -- responses (documentation only) ------------------------------------------------------------


class ErrorBody(BaseModel):
    """The fields of an error."""

    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorEnvelope(BaseModel):
    """``{"error": {...}}``: every non-2xx JSON body."""

    error: ErrorBody


class UsageModel(BaseModel):
    """Token counts."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class AssistantMessage(BaseModel):
    """The generated message."""

    role: Literal["assistant"] = "assistant"
    content: str | None
    reasoning_content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


class TopLogprobModel(BaseModel):
    """An alternative token at one position."""

    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprobModel(TopLogprobModel):
    """A generated token, with its most likely alternatives."""

    top_logprobs: list[TopLogprobModel]


class ChoiceLogprobs(BaseModel):
    """``choices[].logprobs`` (present when the request set ``logprobs: true``)."""

    content: list[TokenLogprobModel] | None
    refusal: None = None


class Choice(BaseModel):
    """The single choice of a completion."""

    index: int
    message: AssistantMessage
    finish_reason: Literal["stop", "length", "tool_calls", "cancelled", "error"]
    logprobs: ChoiceLogprobs | None = None


class ChatCompletionResponse(BaseModel):
    """A non-streaming ``chat.completion``."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[Choice]
    usage: UsageModel
    afm_profile: dict[str, Any] | None = None
    afm_profile_extended: dict[str, Any] | None = None


class CancellationResponse(BaseModel):
    """``POST /v1/chat/completions/{request_id}/cancel``."""

    id: str
    object: Literal["chat.completion.cancellation"]
    cancelled: bool
    error: ErrorBody | None = None


class ModelMetadata(BaseModel):
    """What was loaded and how (an afm-struct extension of OpenAI's model object)."""

    source: str  # "mlx", "gguf", "embedded"
    path: str
    device: str
    stored: str  # what the source holds ("bfloat16", "4-bit affine"...; "" for GGUF)
    weights: str  # how it is held: "float32", "as-stored", "quantized"...
    weights_reason: str
    weight_bytes: int
    context_length: int
    aliases: list[str]


class ModelCard(BaseModel):
    """One entry of ``GET /v1/models``."""

    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    metadata: ModelMetadata | None = None


class ModelList(BaseModel):
    """``GET /v1/models``."""

    object: Literal["list"]
    data: list[ModelCard]
