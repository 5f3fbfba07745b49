"""``response_format`` → compiled constraint: the one integration point with the grammar compiler.

:func:`plan_structured` validates the request's schema, compiles it off the event loop and says
how the server must treat the output: an *enforced* constraint streams as generated (the mask
guarantees bare JSON); a *best-effort* one (downgraded, or no compiler available) is deferred to
the end of generation and sanitized, so clients never see markdown fences.  A strict schema
served best-effort sets ``X-Grammar-Constraints: downgraded``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from afm_struct.errors import SchemaError
from afm_struct.models.tokenizer import Tokenizer

from .schemas import ResponseFormatJsonObject, ResponseFormatJsonSchema, ResponseFormatText

ResponseFormat = ResponseFormatText | ResponseFormatJsonObject | ResponseFormatJsonSchema
Compile = Callable[[Tokenizer, Any], Any]

_FENCE_WHOLE = re.compile(r"^```[A-Za-z0-9_+-]*[ \t]*\n?(.*?)\n?[ \t]*```$", re.S)
_FENCE_ANY = re.compile(r"```[A-Za-z0-9_+-]*[ \t]*\n(.*?)```", re.S)


def sanitize_json_text(text: str) -> str:
    """Best-effort unfenced JSON from model text: drop markdown fences and surrounding prose.

    Returns the first complete JSON value found (as written, not re-serialized), else the
    fence-stripped text.  Pure; used when no constraint guarantees the output.
    """
    s = text.strip()
    whole = _FENCE_WHOLE.match(s)
    if whole:
        s = whole.group(1).strip()
    else:
        inner = _FENCE_ANY.search(s)
        if inner:
            s = inner.group(1).strip()
    decoder = json.JSONDecoder()
    try:
        decoder.decode(s)
        return s
    except ValueError:
        pass
    for i, ch in enumerate(s):
        if ch in "{[":
            try:
                _, end = decoder.raw_decode(s, i)
            except ValueError:
                continue
            return s[i:end]
    return s.replace("```", "").strip() if s.startswith("```") else s


@dataclass(frozen=True)
class StructuredPlan:
    """How one request's output is constrained and delivered."""

    constraint: Any | None  # for GenerationRequest.constraint (None: no mask)
    json_output: bool  # the client must receive unfenced JSON
    enforced: bool  # the mask guarantees the output: stream it as generated
    downgraded: bool  # a strict request runs best-effort: X-Grammar-Constraints: downgraded
    reason: str | None = None
    sanitize: Callable[[str], str] = sanitize_json_text
    strict: bool = False  # the caller asked for json_schema strict

    def without_mask(self, reason: str) -> StructuredPlan:
        """This plan run best-effort (another constraint owns the mask): deferred + sanitized."""
        if not self.json_output:
            return self
        return dataclasses.replace(self, constraint=None, enforced=False, downgraded=self.strict,
                                   reason=reason)

    @property
    def defer(self) -> bool:
        """Best-effort JSON is held back and sanitized at the end."""
        return self.json_output and not self.enforced


TEXT_PLAN = StructuredPlan(constraint=None, json_output=False, enforced=True, downgraded=False)


def default_compiler() -> Compile | None:
    """``afm_struct.grammar.compiler.compile_constraint`` when that module is present."""
    try:
        from afm_struct.grammar.compiler import compile_constraint  # type: ignore[import-not-found]
    except ImportError:
        return None
    return compile_constraint  # type: ignore[no-any-return]


def _check_schema(schema: Any) -> None:
    """400 with the JSON path when ``schema`` is not a valid JSON Schema."""
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise SchemaError("the schema must be a JSON object or boolean",
                          param="response_format.json_schema.schema")
    import jsonschema

    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        path = "$" + "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in exc.absolute_path)
        raise SchemaError(f"invalid JSON Schema: {exc.message}", path=path,
                          param="response_format.json_schema.schema") from None


def _constraint_request(fmt: ResponseFormatJsonObject | ResponseFormatJsonSchema) -> tuple[Any, bool]:
    """The grammar package's request value, and whether the caller asked for strict."""
    from afm_struct.grammar.spec import JsonObjectRequest, JsonSchemaRequest

    if isinstance(fmt, ResponseFormatJsonObject):
        return JsonObjectRequest(), False
    spec = fmt.json_schema
    schema = spec.schema_ if spec.schema_ is not None else True
    strict = bool(spec.strict)
    return JsonSchemaRequest(schema=schema, strict=strict, name=spec.name), strict


async def plan_structured(tokenizer: Tokenizer, fmt: ResponseFormat | None, *,
                          compile_fn: Compile | None = None) -> StructuredPlan:
    """Validate and compile ``response_format`` (off the event loop); raise 400-class errors."""
    if fmt is None or isinstance(fmt, ResponseFormatText):
        return TEXT_PLAN
    if isinstance(fmt, ResponseFormatJsonSchema):
        if fmt.json_schema.schema_ is not None:
            _check_schema(fmt.json_schema.schema_)
    request, strict = _constraint_request(fmt)
    compile_fn = compile_fn or default_compiler()
    if compile_fn is None:
        return StructuredPlan(constraint=None, json_output=True, enforced=False, downgraded=strict,
                              reason="no grammar compiler in this build; output is sanitized",
                              strict=strict)
    compiled = await asyncio.to_thread(compile_fn, tokenizer, request)
    enforced = str(getattr(compiled, "mode", "downgraded")) == "enforced"
    sanitize = getattr(compiled, "sanitize", None) or sanitize_json_text
    return StructuredPlan(constraint=compiled, json_output=True, enforced=enforced,
                          downgraded=strict and not enforced, reason=getattr(compiled, "reason", None),
                          sanitize=sanitize, strict=strict)
