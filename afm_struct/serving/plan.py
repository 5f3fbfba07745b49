"""One request as the engine serves it, whatever protocol carried it: the generation plan.

A protocol adapter (``server/chat/adapter.py`` for Chat Completions) checks its request and
reads it into a :class:`GenerationPlan`; the core (``server/admission.py``, ``server/run.py``)
renders, compiles, admits and runs the plan, and never looks at the request again.

Errors name the request path of a bad value (``param``), and paths are the protocol's: chat's
``messages`` is the Responses API's ``input``, a chat tool's schema sits at
``tools.0.function.parameters`` and a Responses one at ``tools.0.parameters``.  So the plan
carries where its parts came from: :attr:`OutputFormat.param`, each tool's path (checked by
:func:`afm_struct.tools.check_tools`), the field that set the budget (:attr:`Budget.param`) and
:class:`RequestPaths` for what the engine names in its own terms.

Plain frozen dataclasses: no pydantic, no HTTP, no protocol shapes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from ..decoding.sampling import SamplingParams
from ..errors import AfmError
from ..grammar.engines.options import without_engine_options
from ..grammar.spec import (
    ConstraintRequest,
    JsonObjectRequest,
    JsonSchemaRequest,
    LarkRequest,
    RegexRequest,
    StructuralTagRequest,
    ToolDef,
)
from ..tools.definitions import Choice

# What the engine calls the conversation in the ``param`` of its errors (prompt too long, a
# control token in request text, context overflow).
ENGINE_CONVERSATION = "messages"


# The chat-template variable that switches a model's thinking on or off (Qwen3's; templates
# without a switch ignore it).
THINKING_SWITCH = "enable_thinking"


@dataclass(frozen=True)
class Conversation:
    """The turns to render with the chat template, as its dicts (``role``, ``content``, and
    ``name``, ``tool_calls``, ``tool_call_id`` where they apply; ``developer`` already read as
    ``system``).  ``template_kwargs`` are extra template variables as the caller sent them
    (chat's ``chat_template_kwargs``).  ``prompt`` replaces all of them: a raw prompt
    (:meth:`raw`).  ``thinking`` is the protocol's reasoning setting (the
    Responses API's ``reasoning.effort``): None leaves the template's default, True / False
    set its thinking switch unless ``template_kwargs`` set it already."""

    messages: list[dict[str, Any]]
    template_kwargs: dict[str, Any] | None = None
    thinking: bool | None = None
    # A raw prompt (text completions): tokenized as written, no template, no thinking split.
    prompt: str | None = None

    @classmethod
    def raw(cls, prompt: str) -> Conversation:
        """A prompt the caller wrote whole (``/v1/completions``, Ollama's ``raw``): no chat
        template is applied, and special-token text in it is read as those tokens (the caller
        owns the whole prompt, as vLLM reads it); see
        :meth:`afm_struct.models.tokenizer.Tokenizer.encode_raw_prompt`."""
        return cls(messages=[], prompt=prompt)

    def template_variables(self) -> dict[str, Any] | None:
        """The extra variables to render the template with (None: none)."""
        if self.thinking is None:
            return self.template_kwargs
        return {THINKING_SWITCH: self.thinking, **(self.template_kwargs or {})}


@dataclass(frozen=True)
class OutputFormat:
    """How the answer's text is constrained: free ``text``, any JSON object, an instance of
    ``schema``, a whole-output ``regex``, a Lark ``grammar`` or a ``structural_tag`` (all three
    in ``text``; a structural tag as the caller's JSON).  ``strict``:
    the caller asked for exact enforcement, and is told when it is served best-effort;
    ``exact_only``: refuse it rather than serve it best-effort; ``converted``: the grammar was
    written in GBNF / EBNF (its compile errors then speak of the Lark it became), or the structural
    tag sent as JSON text (its errors then name the field, its parts having no request path).  ``param`` is
    where the schema, pattern or grammar sits in the request."""

    kind: Literal["text", "json_object", "json_schema", "regex", "grammar", "structural_tag"] = "text"
    schema: dict[str, Any] | bool | None = None
    strict: bool = False
    name: str | None = None
    param: str | None = None
    text: str | None = None
    exact_only: bool = False
    converted: bool = False

    @property
    def json_output(self) -> bool:
        """The answer is JSON (held back and sanitized when served best-effort)."""
        return self.kind in ("json_object", "json_schema")

    def constraint_request(self) -> ConstraintRequest | None:
        """The grammar compiler's request for this format (None: free text, nothing to compile)."""
        if self.kind == "json_object":
            return JsonObjectRequest()
        if self.kind == "json_schema":
            schema = self.schema if self.schema is not None else True
            if self.param is None:
                return JsonSchemaRequest(schema=schema, strict=self.strict, name=self.name)
            return JsonSchemaRequest(schema=schema, strict=self.strict, name=self.name, param=self.param)
        if self.kind == "regex":
            return RegexRequest(self.text or "")
        if self.kind == "grammar":
            # The request's grammar sets no engine option (grammar/engines/options.py).
            return LarkRequest(without_engine_options(self.text or ""))
        if self.kind == "structural_tag":  # text: the caller's structural tag as JSON
            return StructuralTagRequest(self.text or "{}", self.param or "response_format")
        return None


TEXT = OutputFormat()


@dataclass(frozen=True)
class ToolUse:
    """The tools the model may call (checked: :func:`afm_struct.tools.check_tools`), the
    normalized ``tool_choice`` and whether calls may run in parallel (None: the default, yes).

    ``format_answer``: a JSON output format is enforced inside the tool grammar as the answer
    the calls alternate with (chat, Responses, Messages); False (Ollama) keeps the tool grammar's
    free text, the format best-effort beside it.  ``max_calls``: the
    turn ends once that many calls are whole (the Responses API's ``max_tool_calls``)."""

    tools: tuple[ToolDef, ...] = ()
    choice: Choice = field(default_factory=lambda: Choice("none"))
    parallel: bool | None = None
    format_answer: bool = False
    max_calls: int | None = None


@dataclass(frozen=True)
class Budget:
    """How ``sampling.max_tokens`` was set.  ``explicit``: the request asked for that many
    tokens, so a prompt that leaves fewer is a 400, never a smaller budget (else it is a ceiling
    the context may lower).  ``param``: the request field that set it, or would have."""

    explicit: bool
    param: str
    # Thinking tokens allowed before the close tag is forced (chat's max_reasoning_tokens).
    reasoning_tokens: int | None = None
    # The request set the thinking budget itself (max_reasoning_tokens, reasoning.effort; None
    # then means no limit): no default budget applies (serving/reasoning_budget.py).
    reasoning_set: bool = False


@dataclass(frozen=True)
class Delivery:
    """How the answer goes back: streamed or whole, with the usage event when streamed, and
    the profile asked for (its key, ``X-AFM-Profile``).  ``include_partial``: each content
    event of a JSON answer and each tool-argument event carries the value parsed so far
    (:mod:`afm_struct.serving.partials`); ``enforcement``: the enforcement report is sent
    last (``X-AFM-Enforcement``); ``token_details``: each answer event carries its tokens'
    details and the per-field sums come at the end (:mod:`afm_struct.serving.token_details`)."""

    stream: bool = False
    include_usage: bool = False
    profile: str | None = None
    include_partial: bool = False
    enforcement: bool = False
    token_details: bool = False


@dataclass(frozen=True)
class RequestPaths:
    """Where the parts the engine names in its own terms sit in this protocol's request."""

    conversation: str = ENGINE_CONVERSATION

    def rename(self, err: AfmError) -> AfmError:
        """``err`` with an engine-named ``param`` replaced by this protocol's path."""
        if err.param == ENGINE_CONVERSATION:
            err.param = self.conversation
        return err

    @contextmanager
    def naming(self) -> Iterator[None]:
        """Errors raised inside name this protocol's paths (:meth:`rename`)."""
        try:
            yield
        except AfmError as err:
            self.rename(err)
            raise


@dataclass(frozen=True)
class GenerationPlan:
    """Everything the core needs to serve one request.

    ``request_id`` is the correlation ID (``X-Request-ID``: cancels name it); ``model`` the
    served name to echo; ``id_prefix`` the protocol's prefix of the response id the core makes
    once the request is admissible (``chatcmpl-``).  ``logprobs``: None (off) or how many
    alternatives per token (0-20).  ``close_on_length``: None takes the server's setting.
    ``skip_special_tokens``: special tokens and unread markup have no text (as vLLM's flag).
    """

    request_id: str
    model: str
    conversation: Conversation
    sampling: SamplingParams
    budget: Budget
    id_prefix: str
    output: OutputFormat = TEXT
    tools: ToolUse = field(default_factory=ToolUse)
    logprobs: int | None = None
    close_on_length: bool | None = None
    skip_special_tokens: bool = True
    delivery: Delivery = field(default_factory=Delivery)
    paths: RequestPaths = field(default_factory=RequestPaths)
