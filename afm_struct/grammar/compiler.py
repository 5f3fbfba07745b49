"""The one compile API: a constraint request in, a :class:`CompiledConstraint` out.

    constraint = compile_constraint(tokenizer, JsonSchemaRequest(schema), CompileOptions())
    matcher = constraint.new_matcher()        # None only on the unconstrained rung
    ...generate under matcher...
    outcome = constraint.validate(text)       # always against the caller's original schema

A compiled constraint says how exactly it enforces the request (``mode``/``rung``/``reason``),
which rewrites it needed, which engine runs it and what the compile cost.  Results are cached
(LRU: one cache per tokenizer and set of options, which the tokenizer's state owns, keyed by the
request); a cache hit reports ``cached=True``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import AfmError, GrammarLimitError, InvalidRequestError, SchemaError
from .cache import LRUCache
from .closer.lark_budget import check_grammar_budgets
from .closer.literal_budget import check_forced_runs, longest_forced_run
from .compile_memory import CompileMemory, estimate_compile_mb
from .diagnostics import grammar_problem, regex_problem
from .empty_language import check_some_output
from .engines.llguidance_engine import EngineCompileError, EngineNumbersError, LLGuidanceEngine
from .engines.protocol import CompiledGrammar, Matcher
from .ladder import LadderEngine, LLGuidanceLadder, OutlinesLadder, climb, failure_reason
from .patterns.classify import classify_pattern
from .schema.check import check_schema, schema_limits_reason
from .schema.rewrites import RewriteResult, mentioned_triggers, rewrite_schema
from .schema.value_kinds import ITEM_CONTAINS
from .spec import (
    BACKENDS,
    PROPERTY_ORDERS,
    WHITESPACE_MODES,
    CompileOptions,
    ConstraintRequest,
    JsonObjectRequest,
    JsonSchemaRequest,
    LarkRequest,
    Mode,
    RegexRequest,
    Rung,
    StructuralTagRequest,
    ToolCallRequest,
    ValidationOutcome,
)
from .structural_tag_compile import build_structural_tag
from .tool_schema import tool_call_schema
from .validation import sanitize_json_text, validate_json
from .worker import WorkerLimitError, run_with_timeout

if TYPE_CHECKING:
    from ..models.tokenizer import Tokenizer

logger = logging.getLogger(__name__)

# llguidance's size limits, hit while building a grammar ("grammar size (number of symbols) too
# big", "initial lexer configuration (grammar) too big").
_TOO_BIG = re.compile(r"\btoo big \(limit")

# Schemas whose only rewrite triggers are these keep their form in most cases (on the dev set,
# 2,519 of 3,320 schemas, 272 of them rewritten after all), so their exact compile starts
# before the rewrites (see ConstraintCompiler._json_schema).  The others are mostly rewritten
# (oneOf 95 %, not 94 %, allOf 83 %): their compile waits for the rewrites, to spare a wasted one.
_USUALLY_UNCHANGED = frozenset({"$ref", "const", "enum", "format", "pattern"})


@dataclass(frozen=True)
class CompiledConstraint:
    """A request compiled for one tokenizer: immutable, shared, makes per-request matchers."""

    kind: str
    mode: Mode
    rung: Rung
    reason: str | None
    rewrites: tuple[str, ...]
    backend: str
    compile_ms: float
    cached: bool
    strict: bool
    grammar: CompiledGrammar | None = dataclasses.field(repr=False, default=None)
    schema: Any = dataclasses.field(repr=False, default=None)  # the ORIGINAL schema (JSON kinds)
    pattern: str | None = dataclasses.field(repr=False, default=None)
    tokenizer: Tokenizer | None = dataclasses.field(repr=False, default=None, compare=False)
    # Where each rewrite fired: (JSON pointer in the original schema, rewrite name).
    rewrite_sites: tuple[tuple[str, str], ...] = dataclasses.field(repr=False, default=())

    @property
    def flag_downgraded(self) -> bool:
        """True when a strict request runs best-effort (``X-Grammar-Constraints: downgraded``)."""
        from .downgrade import is_downgraded

        return is_downgraded(self.strict, self.mode)

    def new_matcher(self) -> Matcher | None:
        """A fresh matcher, or None on the unconstrained rung (generate freely, then sanitize)."""
        return None if self.grammar is None else self.grammar.new_matcher()

    def validate(self, text: str) -> ValidationOutcome:
        """Judge a finished output by the ORIGINAL request (not the relaxed grammar)."""
        if self.kind in ("json_schema", "tool_call"):
            return validate_json(text, self.schema)
        if self.kind == "json_object":
            return validate_json(text, None, require_object=True)
        if self.kind == "regex" and self.pattern is not None:
            try:
                ok = re.fullmatch(self.pattern, text) is not None
            except re.error:  # Rust-only syntax: fall back to the grammar walk below
                ok = self._walk(text)
            return ValidationOutcome(ok, () if ok else ("output does not match the pattern",), text)
        ok = self._walk(text)
        return ValidationOutcome(ok, () if ok else ("output does not derive from the grammar",), text)

    def _walk(self, text: str) -> bool:
        matcher = self.new_matcher()
        if matcher is None or self.tokenizer is None:
            return True
        return all(matcher.advance(t) for t in self.tokenizer.encode(text)) and matcher.is_accepting()

    def is_prefix(self, text: str) -> bool:
        """True when ``text`` can be continued into an instance: the tokens of ``text`` fed to a
        fresh matcher, none rejected (how a budget-cut output is judged; ``validate`` asks
        for a whole instance).  Always True on the unconstrained rung."""
        matcher = self.new_matcher()
        if matcher is None or self.tokenizer is None:
            return True
        return all(matcher.advance(t) for t in self.tokenizer.encode(text))

    def sanitize(self, text: str) -> str:
        """The JSON payload of a free-form output (fences and prose removed); other kinds as is."""
        if self.kind in ("json_schema", "tool_call", "json_object"):
            return sanitize_json_text(text)
        return text


def schema_key(value: Any) -> str:
    """Compact JSON with the caller's key order: the grammar emits properties in that order, so
    two spellings of one schema are two grammars (and unsorted dumping is the faster one)."""
    return json.dumps(value, separators=(",", ":"))


class ConstraintCompiler:
    """Compiles requests for one tokenizer with one set of options; thread-safe."""

    def __init__(self, tokenizer: Tokenizer, options: CompileOptions | None = None) -> None:
        self.options = options = options or CompileOptions()
        if options.backend not in BACKENDS:
            raise InvalidRequestError(f"unknown grammar backend {options.backend!r}; use one of {BACKENDS}",
                                      param="backend")
        if options.whitespace not in WHITESPACE_MODES:
            raise InvalidRequestError(f"unknown whitespace mode {options.whitespace!r}", param="whitespace")
        if options.property_order not in PROPERTY_ORDERS:
            raise InvalidRequestError(f"unknown property order {options.property_order!r}; use one of "
                                      f"{PROPERTY_ORDERS}", param="property_order")
        self.tokenizer = tokenizer
        self.cache: LRUCache[CompiledConstraint] = LRUCache(options.cache_size, options.cache_memory_mb)
        self.memory = CompileMemory(options.compile_memory_mb)
        self._generic: dict[str, CompiledGrammar] = {}
        # llguidance also serves regex / Lark / json_object for the outlines backend when needed.
        self.llguidance = LLGuidanceEngine(tokenizer, options)
        self._llguidance_ladder = LLGuidanceLadder(self.llguidance, options)
        self.engine: LadderEngine
        if options.backend == "outlines":
            from .engines.outlines_engine import OutlinesEngine

            self.outlines: Any = OutlinesEngine(tokenizer, options)
            self.engine = OutlinesLadder(self.outlines)
        else:
            self.engine = self._llguidance_ladder

    # ------------------------------------------------------------------ public

    def compile(self, request: ConstraintRequest) -> CompiledConstraint:
        """Compile ``request`` (cached). Raise :class:`SchemaError` for invalid input only."""
        start = time.perf_counter()
        # The schema's compact JSON: the cache key's body, and reused by the compile (its size,
        # its keywords, the engine's input) instead of dumping the schema again for each.
        text = schema_key(request.schema) if isinstance(request, JsonSchemaRequest) else None
        key = self._key(request, text)
        hit = self.cache.get(key)
        if hit is not None:
            return dataclasses.replace(hit, cached=True, compile_ms=(time.perf_counter() - start) * 1e3)
        # The key holds the constraint's text: its size is the memory estimate's proxy.
        mb = estimate_compile_mb(len(key))
        try:
            if mb > self.options.max_compile_mb:
                result = self._over_memory(request, mb)
            else:
                with self.memory.admit(mb):
                    result = self._compile(request, start, text)
        except AfmError:
            raise
        except Exception as exc:  # a bug or a library quirk must not take the server down
            logger.exception("constraint compile failed unexpectedly; serving unconstrained")
            result = self._result(request, Rung.UNCONSTRAINED, None, f"internal_error:{type(exc).__name__}",
                                  schema=getattr(request, "schema", None))
        check_some_output(request, result.grammar, int(self.tokenizer.vocab_size),
                          self.llguidance.opening_tokens)
        result = dataclasses.replace(result, compile_ms=(time.perf_counter() - start) * 1e3)
        # Only a grammar of its own weighs (the generic rungs share theirs).
        own = result.grammar is not None and result.rung in (Rung.EXACT, Rung.RELAXED)
        self.cache.put(key, result, mb if own else 0.0)
        return result

    def close(self) -> None:
        """Release worker processes (outlines backend)."""
        if hasattr(self, "outlines"):
            self.outlines.close()

    # ------------------------------------------------------------------ internals

    def _over_memory(self, request: ConstraintRequest, mb: float) -> CompiledConstraint:
        """A constraint whose compile is estimated over ``max_compile_mb``: a JSON kind is
        served generic JSON without compiling it (reason ``compile_memory``), a grammar or
        pattern is refused (nothing lower serves it)."""
        if isinstance(request, JsonSchemaRequest | ToolCallRequest):
            schema = (tool_call_schema(request.tools) if isinstance(request, ToolCallRequest)
                      else request.schema)
            param = getattr(request, "param", "tools")
            check_schema(schema, param=param)  # an invalid schema is told as such first
            result = climb(self.engine, schema, time.perf_counter(), self.options.timeout_s,
                           start_reason="compile_memory", generic_cache=self._generic)
            return self._result(request, result.rung, result.grammar, result.reason, schema=schema)
        param = getattr(request, "param", "grammar" if isinstance(request, LarkRequest) else "pattern")
        raise GrammarLimitError(
            f"the {param} is too large to compile within this server's per-compile memory bound "
            f"(about {mb:.0f} MB estimated, {self.options.max_compile_mb} MB allowed): make it smaller",
            param=param)

    def _key(self, request: ConstraintRequest, text: str | None = None) -> str:
        if isinstance(request, JsonSchemaRequest):
            body = (schema_key(request.schema) if text is None else text) + f"|{request.strict}"
        elif isinstance(request, ToolCallRequest):
            body = schema_key([[t.name, t.parameters] for t in request.tools]) + f"|{request.strict}"
        elif isinstance(request, RegexRequest):
            body = request.pattern
        elif isinstance(request, LarkRequest | StructuralTagRequest):
            body = request.grammar if isinstance(request, LarkRequest) else request.cache_key
        else:
            body = ""
        # The cache is this compiler's alone (one tokenizer, one set of options): the request
        # is the whole key.
        return f"{request.kind}|{body}"

    def _result(self, request: ConstraintRequest, rung: Rung, grammar: CompiledGrammar | None,
                reason: str | None, *, rewrites: tuple[str, ...] = (), schema: Any = None,
                pattern: str | None = None, backend: str | None = None,
                sites: tuple[tuple[str, str], ...] = ()) -> CompiledConstraint:
        return CompiledConstraint(
            kind=request.kind, mode=Mode.ENFORCED if rung is Rung.EXACT else Mode.DOWNGRADED, rung=rung,
            reason=reason, rewrites=rewrites, backend=backend or self.engine.name, compile_ms=0.0,
            cached=False, strict=bool(getattr(request, "strict", True)), grammar=grammar, schema=schema,
            pattern=pattern, tokenizer=self.tokenizer, rewrite_sites=sites)

    def _compile(self, request: ConstraintRequest, start: float,
                 text: str | None = None) -> CompiledConstraint:
        if isinstance(request, JsonSchemaRequest | ToolCallRequest):
            if isinstance(request, ToolCallRequest):
                schema = tool_call_schema(request.tools)
                check_schema(schema, param="tools")
                return self._json_schema(request, schema, start, prechecked=True)
            return self._json_schema(request, request.schema, start, text=text)
        if isinstance(request, JsonObjectRequest):
            # Always llguidance: outlines-core unrolls nesting only 3 levels deep (not exact).
            result = climb(self._llguidance_ladder, {"type": "object"}, start, self.options.timeout_s)
            return self._result(request, result.rung, result.grammar, result.reason,
                                backend="llguidance")
        if isinstance(request, RegexRequest):
            return self._regex(request, start)
        if isinstance(request, LarkRequest):
            return self._lark(request, start)
        if isinstance(request, StructuralTagRequest):  # Lark on llguidance, whatever the backend
            built = build_structural_tag(self.llguidance, self.options, request, start)
            return self._result(request, built.rung, built.grammar, built.reason, rewrites=built.rewrites,
                                backend="llguidance", schema=built.bodies)  # schema: the bodies' outcomes
        raise InvalidRequestError(f"unknown constraint request {type(request).__name__}")

    def _json_schema(self, request: ConstraintRequest, schema: Any, start: float, *,
                     prechecked: bool = False, text: str | None = None) -> CompiledConstraint:
        """``text``: ``schema`` as compact JSON, when the caller has it."""
        limits = schema_limits_reason(schema, self.options, text)
        # Errors name where the caller's request holds the schema (JsonSchemaRequest.param).
        param = getattr(request, "param", "tools")
        # Where the rewrites usually change nothing, the original's exact compile starts first
        # (llguidance builds without the GIL), so that the Python checks below run alongside it;
        # it is dropped when they change the schema or refuse it.
        triggers = mentioned_triggers(text) if text is not None and not limits and not prechecked else None
        early = None
        if triggers is not None and triggers <= _USUALLY_UNCHANGED:
            early = self.engine.start_exact(schema, text)
        # A forced run the lexer cannot follow (literal_budget.py): refused for a strict
        # request, served without it otherwise; an invalid schema is told as such first.
        run = None if limits else longest_forced_run(schema, text)
        if limits or run is not None:
            if early is not None:
                early.cancel()  # (if still queued; else it runs out, bounded, unread)
            if not prechecked:
                check_schema(schema, param=param, text=text)
            if run is not None:
                if getattr(request, "strict", True):
                    raise run.error(param)
                limits = run.reason
            result = climb(self.engine, schema, start, self.options.timeout_s, start_reason=limits,
                           generic_cache=self._generic)
            return self._result(request, result.rung, result.grammar, result.reason, schema=schema)
        future = None
        if prechecked:
            rewritten = rewrite_schema(schema)
        else:
            try:
                rewritten = rewrite_schema(schema, text, triggers)
            except Exception:  # junk input: the check below says what is wrong with it
                check_schema(schema, param=param, text=text)
                raise
            if not rewritten.applied:
                # The same schema (the walk's copy can carry an unused negated definition).
                rewritten = RewriteResult(schema, ())
            if early is not None and not rewritten.applied:
                future = early
            else:
                if early is not None:
                    early.cancel()  # (if still queued; else it runs out, bounded, unread)
                same = rewritten.schema is schema
                future = self.engine.start_exact(rewritten.schema, text if same else None)
            # The meta-schema check, references and satisfiability: alongside the compile.
            check_schema(schema, param=param, text=text)
        result = climb(self.engine, rewritten.schema, start, self.options.timeout_s,
                       exact_future=future, generic_cache=self._generic)
        applied, sites = rewritten.applied, rewritten.sites
        if result.rung is not Rung.EXACT and _says_contains(rewritten.schema):
            # Written with "some item ..." (contains), which only the any-order grammar takes:
            # the rewrites without it may still find a form the engine takes.
            token = ITEM_CONTAINS.set(False)
            try:
                plain = rewrite_schema(schema)
            finally:
                ITEM_CONTAINS.reset(token)
            again = climb(self.engine, plain.schema, start, self.options.timeout_s,
                          generic_cache=self._generic)
            if again.rung is Rung.EXACT:
                result, applied, sites = again, plain.applied, plain.sites
        if (applied and result.rung is not Rung.EXACT
                and result.reason not in ("compile_timeout", "compile_memory")):
            # A rewrite can leave a schema the engine cannot take (a negation written with
            # contains, nested negated patterns) where the original needed no rewrite there (the
            # engine proves some oneOf branches disjoint itself), or one it finds too large even
            # relaxed.  The original then serves if it is exact, or relaxed where the rewritten
            # schema fell to generic JSON (its relaxed rung drops only what the engine lacks).
            original = climb(self.engine, schema, start, self.options.timeout_s, generic_cache=self._generic)
            if original.rung is Rung.EXACT or (original.rung is Rung.RELAXED
                                               and result.rung in (Rung.GENERIC_JSON, Rung.UNCONSTRAINED)):
                result, applied, sites = original, (), ()
        return self._result(request, result.rung, result.grammar, result.reason,
                            rewrites=applied, schema=schema, sites=sites)

    def _regex(self, request: RegexRequest, start: float) -> CompiledConstraint:
        if not isinstance(request.pattern, str):
            raise SchemaError("the pattern must be a string", path="$.pattern", param="pattern")
        # The budget first: an oversized pattern is refused before anything reads it.
        check_forced_runs({"pattern": request.pattern}, param="", engine_syntax=True)
        irregular = classify_pattern(request.pattern)
        if irregular:
            return self._result(request, Rung.UNCONSTRAINED, None, irregular, pattern=request.pattern)
        try:
            grammar = self.engine.regex(request.pattern, self.options.timeout_s)
        except WorkerLimitError as exc:
            return self._result(request, Rung.UNCONSTRAINED, None, exc.reason, pattern=request.pattern)
        except EngineCompileError as exc:
            # The engine's message quotes its own generated grammar: only the diagnosis goes out.
            raise SchemaError(f"invalid regex: {regex_problem(exc.message)}", path="$.pattern",
                              param="pattern") from exc
        return self._result(request, Rung.EXACT, grammar, None, pattern=request.pattern)

    def _lark(self, request: LarkRequest, start: float) -> CompiledConstraint:
        # Lark is llguidance-only (outlines-core has no CFGs), whatever the configured backend.
        # A run the engine cannot follow is refused before it fails at the first token.
        check_grammar_budgets(request.grammar)
        try:
            grammar = run_with_timeout(lambda: self.llguidance.compile_lark(request.grammar),
                                       self.options.timeout_s)
        except WorkerLimitError as exc:
            return self._result(request, Rung.UNCONSTRAINED, None, exc.reason, backend="llguidance")
        except EngineNumbersError as exc:
            # A grammar has no ladder: served exactly or refused, never with a changed number.
            issue = exc.issues[0]
            raise SchemaError(
                f"the grammar's %json block #{(exc.block or 0) + 1} holds a number the grammar engine "
                f"cannot enforce exactly: {issue.message()}; keep integer bounds and values within "
                "±2^53 (64-bit floats), or use a json_schema constraint, which is served best-effort "
                "there", path="$.grammar", param="grammar") from exc
        except EngineCompileError as exc:
            reason = failure_reason(exc.message, None)
            if reason in ("regex_lookaround", "regex_backreference"):
                return self._result(request, Rung.UNCONSTRAINED, None, reason, backend="llguidance")
            if _TOO_BIG.search(exc.message.split("\n", 1)[0]):
                raise GrammarLimitError(
                    "the grammar at $.grammar is larger than the grammar engine allows (over "
                    f"{self.llguidance.limits['max_grammar_size']:,} symbols, or a lexer too large to "
                    "build): make it smaller, e.g. write a repeated item as x{n} instead of n copies",
                    param="grammar") from exc
            raise SchemaError(f"invalid grammar: {grammar_problem(exc.message)}", path="$.grammar",
                              param="grammar") from exc
        return self._result(request, Rung.EXACT, grammar, None, backend="llguidance")


def get_compiler(tokenizer: Tokenizer, options: CompileOptions | None = None) -> ConstraintCompiler:
    """The shared compiler (and so the shared cache) for ``tokenizer`` and ``options``: one per
    set of options, kept in the tokenizer's derived parts."""
    options = options or CompileOptions()
    return tokenizer.derived.part(("compiler", options), "compiler",
                                  lambda: ConstraintCompiler(tokenizer, options))


def compile_constraint(tokenizer: Tokenizer, request: ConstraintRequest,
                       options: CompileOptions | None = None) -> CompiledConstraint:
    """Compile ``request`` for ``tokenizer``: enforced, downgraded (with a reason), or SchemaError."""
    return get_compiler(tokenizer, options).compile(request)


def _says_contains(schema: Any) -> bool:
    """True when a rewrite wrote "some item ..." (``contains``, or drafts 3-4's not/items/not)."""
    text = json.dumps(schema, ensure_ascii=False)
    return '"contains"' in text or '"not": {"items": {"not":' in text
