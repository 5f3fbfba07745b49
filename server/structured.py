"""The plan's output format → compiled constraint: the one integration point with the grammar compiler.

:func:`plan_structured` validates the format's schema, compiles it off the event loop and says
how the server must treat the output: an *enforced* constraint streams as generated (the mask
guarantees bare JSON); a *best-effort* one (downgraded, or no compiler available) is deferred to
the end of generation and sanitized, so clients never see markdown fences.  A strict schema
served best-effort sets ``X-Grammar-Constraints: downgraded`` (the rule:
:func:`afm_struct.grammar.downgrade.is_downgraded`).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from afm_struct.errors import InvalidRequestError, SchemaError
from afm_struct.grammar.downgrade import is_downgraded
from afm_struct.grammar.engines.protocol import Matcher
from afm_struct.grammar.spec import Mode, Rung
from afm_struct.grammar.validation import sanitize_json_text
from afm_struct.models.tokenizer import Tokenizer
from afm_struct.serving.plan import OutputFormat


class CompiledFormat(Protocol):
    """What the server reads of a compiled output format (a ``CompiledConstraint``)."""

    mode: Mode  # ENFORCED: the mask guarantees the output; DOWNGRADED: best-effort
    reason: str | None  # why it was downgraded

    def new_matcher(self) -> Matcher | None:
        """A fresh matcher for one generation (None: no mask)."""

    def sanitize(self, text: str) -> str:
        """The JSON payload of a best-effort output (fences and prose removed)."""


# ``(tokenizer, request) -> CompiledFormat``: the compiler, or a test's stand-in.
Compile = Callable[[Tokenizer, Any], CompiledFormat]


@dataclass(frozen=True)
class StructuredPlan:
    """How one request's output is constrained and delivered."""

    constraint: CompiledFormat | None  # for GenerationRequest.constraint (None: no mask)
    json_output: bool  # the client must receive unfenced JSON
    enforced: bool  # the mask guarantees the output: stream it as generated
    downgraded: bool  # a strict request runs best-effort: X-Grammar-Constraints: downgraded
    reason: str | None = None
    sanitize: Callable[[str], str] = sanitize_json_text
    strict: bool = False  # the caller asked for json_schema strict
    # The compile as the compiler returned it (kept when the mask is given up): the
    # enforcement report's source (server/extensions.py).
    compiled: Any = None

    def without_mask(self, reason: str) -> StructuredPlan:
        """This plan run best-effort (another constraint owns the mask): deferred + sanitized."""
        if not self.json_output:
            return self
        # No mask is the unconstrained rung: a strict format run so is downgraded.
        return dataclasses.replace(self, constraint=None, enforced=False,
                                   downgraded=is_downgraded(self.strict, Rung.UNCONSTRAINED),
                                   reason=reason)

    @property
    def defer(self) -> bool:
        """Best-effort JSON is held back and sanitized at the end."""
        return self.json_output and not self.enforced


TEXT_PLAN = StructuredPlan(constraint=None, json_output=False, enforced=True, downgraded=False)


def default_compiler() -> Compile:
    """The grammar package's ``compile_constraint`` (tests may pass another)."""
    from afm_struct.grammar.compiler import compile_constraint

    return compile_constraint


async def plan_structured(tokenizer: Tokenizer, fmt: OutputFormat | None, *,
                          compile_fn: Compile | None = None) -> StructuredPlan:
    """Validate and compile the output format (off the event loop); raise 400-class errors
    naming where the request holds the schema, pattern or grammar (``fmt.param``)."""
    request = fmt.constraint_request() if fmt is not None else None
    if fmt is None or request is None:
        return TEXT_PLAN
    strict = fmt.strict
    compile_fn = compile_fn or default_compiler()
    try:
        compiled = await asyncio.to_thread(compile_fn, tokenizer, request)
    except InvalidRequestError as exc:
        moved = _at_field(exc, fmt)
        if moved is exc:
            raise
        raise moved from exc
    # Mode(...) also takes the mode's string value, which a test's stand-in compiler may give.
    mode = Mode(compiled.mode)
    if fmt.exact_only and mode is not Mode.ENFORCED:
        raise InvalidRequestError(
            f"{fmt.param} cannot be enforced exactly here ({compiled.reason or 'downgraded'}) and "
            "exact enforcement was required (structured_outputs.disable_fallback); simplify the "
            "constraint or allow fallback", param=fmt.param, code="constraint_not_exact")
    return StructuredPlan(constraint=compiled, json_output=fmt.json_output, enforced=mode is Mode.ENFORCED,
                          downgraded=is_downgraded(strict, mode), reason=compiled.reason,
                          sanitize=compiled.sanitize, strict=strict, compiled=compiled)


def _at_field(exc: InvalidRequestError, fmt: OutputFormat) -> InvalidRequestError:
    """A compile error of a regex or grammar format, naming where the request holds it (the
    compiler names its own request's ``pattern`` / ``grammar``); JSON kinds already do."""
    if fmt.kind == "structural_tag":
        # Its errors name its parts; sent as JSON text they have no path in the request: the field.
        if not fmt.converted:
            return exc
        moved = copy.copy(exc)
        moved.param = fmt.param
        return moved
    if fmt.json_output or fmt.param is None:
        return exc
    if isinstance(exc, SchemaError):
        # A converted grammar's positions are in the Lark it became, which the message says.
        detail = (exc.detail.replace("invalid grammar:", "invalid grammar (after conversion from GBNF to "
                                     "Lark):", 1) if fmt.converted else exc.detail)
        return SchemaError(detail, path=f"$.{fmt.param}", param=fmt.param)
    if exc.param in (None, "", "pattern", "grammar"):
        # e.g. a forced run over the lexer budget, told at the compiler's own "$.pattern"
        message = exc.message.replace("$.pattern", f"$.{fmt.param}").replace("$.grammar", f"$.{fmt.param}")
        return type(exc)(message, param=fmt.param)
    return exc
