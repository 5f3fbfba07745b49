"""Compile a ``structural_tag`` request: its tree read, each JSON body placed on the ladder, one
Lark grammar built on llguidance.

Each body goes through the schema pipeline a ``json_schema`` format does: the meta-schema check
(a 400 naming the body), the forced-run budget, the meaning-keeping rewrites, then the ladder
(exact → relaxed → generic JSON → any JSON), all bodies within the compile's one deadline.  A
body below the exact rung makes the whole constraint downgraded, its reason naming the body
(``response_format.structures.1.schema:unsupported_keyword:x``), so the response says so
(``X-Grammar-Constraints: downgraded``).  The structure around the bodies (tags, triggers,
strings, regexes, free text) is always exact or refused.

Bodies are written in the schema's property order whatever ``property_order`` the server runs
with: the any-order grammar is a grammar of its own, not a ``%json`` block.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import GrammarLimitError, SchemaError
from .closer.lark_budget import check_grammar_budgets
from .closer.literal_budget import longest_forced_run
from .diagnostics import grammar_problem
from .engines.llguidance_engine import EngineCompileError, EngineNumbersError, LLGuidanceEngine
from .engines.protocol import CompiledGrammar
from .ladder import LLGuidanceLadder, climb, generic_schema
from .patterns.json_escapes import guard_patterns
from .schema.check import check_schema, schema_limits_reason
from .schema.rewrites import RewriteResult, rewrite_schema
from .schema.value_kinds import ITEM_CONTAINS
from .spec import CompileOptions, Rung, StructuralTagRequest
from .structural_tag import JsonBody, read_structural_tag
from .structural_tag_lark import structural_tag_lark
from .worker import WorkerLimitError, run_with_timeout

_ENGINE_OPTIONS = "x-guidance"


@dataclass(frozen=True)
class BodyOutcome:
    """Where one body landed: its place in the request (``where``), its original schema, the
    rung and reason of its own ladder and where its rewrites fired (for the enforcement report,
    :func:`afm_struct.grammar.enforcement.enforcement_report`, which reads it as a schema's)."""

    where: str
    schema: Any
    rung: Rung
    reason: str | None
    rewrite_sites: tuple[tuple[str, str], ...]
    kind: str = "json_schema"
    backend: str = "llguidance"


@dataclass(frozen=True)
class StructuralTagBuild:
    """What the compile made: the grammar (None: served unconstrained), its rung and reason
    (the first body below exact), the rewrites the bodies needed and each body's outcome."""

    rung: Rung
    grammar: CompiledGrammar | None
    reason: str | None
    rewrites: tuple[str, ...] = ()
    bodies: tuple[BodyOutcome, ...] = ()


class _Climb(Exception):
    """A body the one-compile attempt cannot write exactly: each body goes up its own ladder."""


class _BodyLadder(LLGuidanceLadder):
    """The ladder for a ``%json`` body: its exact rung is the JSON compiler's alone (the
    any-order grammar a schema-order refusal falls back to is no ``%json`` block)."""

    def build_exact(self, schema: Any, *, text: str | None = None,
                    released: Callable[[], None] | None = None) -> CompiledGrammar:
        return self.backend.compile_json_schema(guard_patterns(schema), released=released)


class _Bodies:
    """Each body's ``%json`` text: exact (``ladder`` False: the one-compile attempt, which the
    whole grammar's compile then proves), or chosen by its place on its own ladder."""

    def __init__(self, engine: LLGuidanceEngine, options: CompileOptions, start: float, *,
                 ladder: bool) -> None:
        self.engine, self.options, self.start = engine, options, start
        in_order = dataclasses.replace(options, property_order="schema")
        self.ladder = _BodyLadder(engine, in_order) if ladder else None
        self.reason: str | None = None
        self.rewrites: list[str] = []
        self.outcomes: list[BodyOutcome] = []

    def text(self, node: JsonBody) -> str:
        schema = node.schema
        check_schema(schema, param=node.where)
        limits = schema_limits_reason(schema, self.options)
        run = None if limits else longest_forced_run(schema)
        if run is not None:
            raise run.error(node.where)  # a structural tag is strict: refused, as a strict json_schema
        if limits and self.ladder is None:
            raise _Climb
        token = ITEM_CONTAINS.set(False)  # "some item" as contains is for the any-order grammar
        try:
            rewritten = RewriteResult(schema, ()) if limits else rewrite_schema(schema)
        finally:
            ITEM_CONTAINS.reset(token)
        # Unchanged: the caller's own schema (the walk's copy can carry an unused definition).
        body = rewritten.schema if rewritten.applied else schema
        rung, reason = Rung.EXACT, None
        if self.ladder is not None:
            result = climb(self.ladder, body, self.start, self.options.timeout_s, start_reason=limits)
            rung, reason = result.rung, result.reason
        self.rewrites.extend(r for r in rewritten.applied if r not in self.rewrites)
        self.outcomes.append(BodyOutcome(node.where, schema, rung, reason, rewritten.sites))
        options = self.engine.exact_json
        if rung is Rung.EXACT:
            body = guard_patterns(body)
        elif rung is Rung.RELAXED and reason != "number_beyond_engine":
            options = self.engine.relaxed_json
        else:  # generic JSON of the top-level type; nothing narrower compiles (any JSON)
            body = generic_schema(body) if rung is not Rung.UNCONSTRAINED else {}
        if rung is not Rung.EXACT and self.reason is None:
            self.reason = f"{node.where}:{reason or 'compile_error'}"
        if isinstance(body, dict):
            # The caller's own engine options never reach the engine (as for json_schema).
            body = {k: v for k, v in body.items() if k != _ENGINE_OPTIONS}
            body[_ENGINE_OPTIONS] = options
        else:
            body = {"allOf": [body], _ENGINE_OPTIONS: options}
        return json.dumps(body)


def build_structural_tag(engine: LLGuidanceEngine, options: CompileOptions, request: StructuralTagRequest,
                         start: float) -> StructuralTagBuild:
    """The grammar of ``request`` on ``engine`` (llguidance: Lark is llguidance's alone).
    Raises 400s naming the part of the request that cannot be served."""
    tree = read_structural_tag(request.source, request.param)
    # The structure's own budgets (rule depth, forced runs, size), its bodies aside: each body's
    # schema is measured by the schema limits.
    check_grammar_budgets(structural_tag_lark(tree, lambda _node: "{}"), param=request.param)
    # One compile first, every body exact: when the engine takes the whole grammar, each body
    # is enforced as its own exact compile would (the same engine and options).  Only when it
    # does not does each body climb its own ladder (a compile each), and the grammar is rebuilt.
    bodies = _Bodies(engine, options, start, ladder=False)
    try:
        lark = structural_tag_lark(tree, bodies.text, engine.spelling)
        return _compiled(engine, options, start, lark, bodies)
    except WorkerLimitError as exc:
        return _unconstrained(bodies, exc)
    except (_Climb, EngineCompileError, EngineNumbersError):
        pass
    bodies = _Bodies(engine, options, start, ladder=True)
    lark = structural_tag_lark(tree, bodies.text, engine.spelling)
    try:
        return _compiled(engine, options, start, lark, bodies)
    except WorkerLimitError as exc:
        return _unconstrained(bodies, exc)
    except EngineNumbersError as exc:  # (bodies carrying such numbers are served generic above)
        raise SchemaError("a body holds a number the grammar engine cannot enforce: "
                          f"{exc.issues[0].message()}", path=f"$.{request.param}",
                          param=request.param) from exc
    except EngineCompileError as exc:
        if "too big" in exc.message.split("\n", 1)[0]:
            raise GrammarLimitError(
                f"the structural tag at {request.param} is larger than the grammar engine allows: use "
                "fewer or smaller tags", param=request.param) from exc
        # The bodies compiled alone, so the error is in a regex or a string of the structure.
        raise SchemaError(f"the structural tag cannot be compiled: {grammar_problem(exc.message)} "
                          "(a regex pattern the engine does not take?)", path=f"$.{request.param}",
                          param=request.param) from exc


def _unconstrained(bodies: _Bodies, exc: WorkerLimitError) -> StructuralTagBuild:
    """Over the compile's time or memory: no grammar, so every body is unconstrained too."""
    outcomes = tuple(dataclasses.replace(b, rung=Rung.UNCONSTRAINED, reason=exc.reason)
                     for b in bodies.outcomes)
    return StructuralTagBuild(Rung.UNCONSTRAINED, None, exc.reason, tuple(bodies.rewrites), outcomes)


def _compiled(engine: LLGuidanceEngine, options: CompileOptions, start: float, lark: str,
              bodies: _Bodies) -> StructuralTagBuild:
    """``lark`` compiled within what is left of the deadline (engine errors raised)."""
    left = start + options.timeout_s - time.perf_counter()
    grammar = run_with_timeout(lambda: engine.compile_lark(lark), max(left, 0.001))
    rung = Rung.EXACT if bodies.reason is None else Rung.RELAXED
    return StructuralTagBuild(rung, grammar, bodies.reason, tuple(bodies.rewrites), tuple(bodies.outcomes))

