"""What can be asked for (constraint requests), how to compile it (options) and what comes back.

Plain frozen dataclasses: a request is a value, so it can be a cache key and crosses threads and
processes freely.  The server maps OpenAI's ``response_format`` / ``tools`` onto these.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Literal

BackendName = Literal["llguidance", "outlines"]
WhitespaceMode = Literal["default", "compact", "flexible"]
PropertyOrder = Literal["schema", "any"]
BACKENDS: tuple[str, ...] = ("llguidance", "outlines")
WHITESPACE_MODES: tuple[str, ...] = ("default", "compact", "flexible")
PROPERTY_ORDERS: tuple[str, ...] = ("schema", "any")


class Mode(enum.StrEnum):
    """How exactly a compiled constraint enforces its request."""

    ENFORCED = "enforced"      # every output the mask allows is valid, every valid output allowed
    DOWNGRADED = "downgraded"  # best-effort: outputs are validated afterwards


class Rung(enum.StrEnum):
    """The steps of the downgrade ladder, from exact to none."""

    EXACT = "exact"                  # the (rewritten) schema, nothing dropped
    RELAXED = "relaxed"              # unsupported keywords dropped (llguidance lenient / coerce_one_of)
    GENERIC_JSON = "generic_json"    # any JSON value of the schema's top-level type(s)
    UNCONSTRAINED = "unconstrained"  # no mask; the output is sanitized and validated afterwards


@dataclass(frozen=True)
class JsonSchemaRequest:
    """``response_format: {"type": "json_schema", ...}``: output one instance of ``schema``.

    ``schema`` is kept as the caller's dict; it is never mutated (rewrites make copies).
    ``strict`` is the caller's OpenAI ``strict`` flag: a strict request served below the exact
    rung must be reported (``X-Grammar-Constraints: downgraded``).  ``param`` is where the
    schema sits in the caller's request, for errors that point into it.
    """

    schema: dict[str, Any] | bool
    strict: bool = True
    name: str | None = None
    param: str = field(default="response_format.json_schema.schema", compare=False)

    kind: Literal["json_schema"] = field(default="json_schema", init=False)


@dataclass(frozen=True)
class JsonObjectRequest:
    """``response_format: {"type": "json_object"}``: any JSON object."""

    kind: Literal["json_object"] = field(default="json_object", init=False)


@dataclass(frozen=True)
class RegexRequest:
    """The whole output must match ``pattern`` (Rust ``regex`` syntax, no lookarounds)."""

    pattern: str

    kind: Literal["regex"] = field(default="regex", init=False)


@dataclass(frozen=True)
class LarkRequest:
    """The whole output must derive from a Lark grammar (llguidance dialect, ``start`` rule)."""

    grammar: str

    kind: Literal["lark"] = field(default="lark", init=False)


@dataclass(frozen=True)
class StructuralTagRequest:
    """``response_format: {"type": "structural_tag", ...}``: free text and tagged sections, each
    tag's body enforced (:mod:`afm_struct.grammar.structural_tag`, either form).  ``source``
    is the caller's object as JSON text; ``param`` where it sits, for errors and reasons that
    point into it (part of the cache key: a reason names it)."""

    source: str
    param: str = "response_format"
    strict: bool = True

    kind: Literal["structural_tag"] = field(default="structural_tag", init=False)

    @property
    def cache_key(self) -> str:
        """The compile cache's key body: where it sits and what it says."""
        return f"{self.param}|{self.source}"


# A tool declared without parameters takes exactly ``{}``.
NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


@dataclass(frozen=True)
class ToolDef:
    """One function tool: name, ``parameters`` schema, description and ``strict`` flag.

    The one tool type: the tools layer parses OpenAI's ``tools`` into these
    (:func:`afm_struct.tools.parse_tools`), and :class:`ToolCallRequest` compiles them.
    ``has_parameters`` is False when the request declared none (``parameters`` is then
    :data:`NO_PARAMETERS`).
    """

    name: str
    parameters: dict[str, Any] | bool = field(default_factory=lambda: dict(NO_PARAMETERS))
    description: str = ""
    strict: bool = False
    has_parameters: bool = True
    # A custom tool's Lark grammar over its raw input (arguments ``{"input": <string>}``): the
    # tool grammar enforces it on the JSON string (afm_struct/tools/lark_input.py).
    input_grammar: str = ""

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI tool dict (what chat templates expect as ``tools``)."""
        fn: dict[str, Any] = {"name": self.name}
        if self.description:
            fn["description"] = self.description
        fn["parameters"] = self.parameters
        return {"type": "function", "function": fn}


@dataclass(frozen=True)
class ToolCallRequest:
    """Output one call ``{"name": <one of tools>, "arguments": {...}}`` (arguments per its schema).

    ``tools`` is a tuple so the request stays hashable; it compiles to a JSON Schema whose
    branches are discriminated by ``name`` (see :mod:`afm_struct.grammar.tool_schema`).
    """

    tools: tuple[ToolDef, ...]
    strict: bool = True

    kind: Literal["tool_call"] = field(default="tool_call", init=False)


ConstraintRequest = (JsonSchemaRequest | JsonObjectRequest | RegexRequest | LarkRequest | ToolCallRequest
                     | StructuralTagRequest)


@dataclass(frozen=True)
class CompileOptions:
    """Knobs of the compiler; one frozen value per server / benchmark run.

    ``whitespace``: ``default`` allows exactly what ``json.dumps`` writes (``", "`` and ``": "``,
    nothing else), ``compact`` allows no whitespace (``","`` / ``":"``), ``flexible`` allows a
    bounded run (at most ``max_whitespace`` characters of space/newline/tab) around every token.

    ``property_order``: ``schema`` (default) accepts an object's properties only in the schema's
    order, which forces every key (more tokens fast-forwarded); ``any`` accepts them in any order
    (each at most once, required ones present; see :mod:`afm_struct.grammar.engines.any_order`) at a
    higher compile and mask cost.
    """

    backend: BackendName = "llguidance"
    whitespace: WhitespaceMode = "default"
    property_order: PropertyOrder = "schema"
    max_whitespace: int = 4
    timeout_s: float = 10.0
    max_memory_mb: int = 4096
    max_schema_bytes: int = 512 * 1024
    max_depth: int = 64
    cache_size: int = 256
    allow_unconstrained: bool = True
    # Compile memory (compile_memory.py), estimated from the constraint's size: one compile over
    # max_compile_mb does not run (a schema is served generic JSON); compiles running together
    # hold at most compile_memory_mb (beyond it, 503 + Retry-After); the cache keeps at most
    # cache_memory_mb of grammars.
    max_compile_mb: int = 64
    compile_memory_mb: int = 256
    cache_memory_mb: int = 512


@dataclass(frozen=True)
class ValidationOutcome:
    """The verdict on one output: ``ok``, the parsed ``value`` (JSON kinds) and readable ``errors``."""

    ok: bool
    errors: tuple[str, ...] = ()
    value: Any = None
