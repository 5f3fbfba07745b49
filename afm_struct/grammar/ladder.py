"""The downgrade ladder for JSON Schemas: exact → relaxed → generic JSON → unconstrained.

Each rung is tried only if the one above failed; the first failure's reason is kept, in a
machine-readable form (``unsupported_keyword:not``, ``regex_lookaround``, ``compile_timeout``),
because that is what the response header and the logs must say.  Every rung shares one
deadline, so a schema can never hold a request longer than ``timeout_s`` in total.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .engines.any_order import any_order_translation
from .engines.llguidance_engine import EngineCompileError, EngineNumbersError, LLGuidanceEngine
from .engines.protocol import RELAXED_COMPILE, CompiledGrammar, SchemaCompileOptions
from .patterns.classify import first_irregular_pattern
from .patterns.json_escapes import guard_patterns
from .schema.keywords import ENGINE_REASONS, TABLE
from .spec import CompileOptions, Rung
from .worker import WorkerLimitError, run_with_timeout, submit

# The exact rung's refusal in property_order="any" when some object would keep the schema's order.
PROPERTY_ORDER_FIXED = "an object keeps the schema's property order"
_UNIMPLEMENTED = re.compile(r'Unimplemented keys: \["([^"]+)"')
# llguidance's words → reason: the keyword table's entries first, then what no keyword causes.
_REASONS: tuple[tuple[str, str], ...] = (
    (EngineNumbersError.PREFIX, "number_beyond_engine"),  # first: its detail names keywords
    *ENGINE_REASONS,
    (PROPERTY_ORDER_FIXED, "property_order_fixed"),
    ("intersection stack level exceeded", "schema_intersection_too_deep"),
    ("Unsatisfiable schema", "unsatisfiable_schema"),
    ("integer range", "unsupported_integer_range"),
    ("look-around", "regex_lookaround"),
    ("lookaround", "regex_lookaround"),
    ("backreference", "regex_backreference"),
    ("regex parse error", "regex_unsupported"),
    ("limit", "compile_limit"),
)


def failure_reason(message: str, schema: Any) -> str:
    """A machine-readable reason for an engine's compile error on ``schema``."""
    if m := _UNIMPLEMENTED.search(message):
        keyword = TABLE.get(m.group(1))
        return keyword.reason if keyword is not None else f"unsupported_keyword:{m.group(1)}"
    if message.startswith("Unknown format:"):
        return f"unsupported_format:{message.split(':', 1)[1].strip().splitlines()[0]}"
    lowered = message.lower()
    if "regex" in lowered or "look" in lowered:
        precise = first_irregular_pattern(schema)
        if precise:
            return precise
    for needle, reason in _REASONS:
        if needle.lower() in lowered:
            return reason
    return "compile_error"


@dataclass(frozen=True)
class LadderResult:
    """Where a schema landed on the ladder."""

    rung: Rung
    grammar: CompiledGrammar | None
    reason: str | None


def generic_schema(schema: Any) -> dict[str, Any]:
    """The generic-JSON rung's schema: any JSON value of the original's top-level type(s)."""
    if isinstance(schema, dict) and isinstance(schema.get("type"), str | list):
        return {"type": schema["type"]}
    return {}


Attempt = Callable[[Any, float], CompiledGrammar]

# How long :meth:`LLGuidanceLadder.start_exact` waits for the compile thread to reach the engine
# (~50-70 µs on an idle host: the thread's wake-up and the JSON conversion; past it, with every
# compile thread busy or a long any-order translation, the caller goes on anyway).
_RELEASE_WAIT_S = 0.005


class LadderEngine:
    """How one backend builds each rung; ``timeout_s`` is what is left of the deadline."""

    name = "abstract"

    def exact(self, schema: Any, timeout_s: float) -> CompiledGrammar:
        """Compile with nothing dropped; raise EngineCompileError / WorkerLimitError."""
        raise NotImplementedError

    def relaxed(self, schema: Any, timeout_s: float) -> CompiledGrammar:
        """Compile with unsupported keywords dropped."""
        raise NotImplementedError

    def generic(self, schema: Any, timeout_s: float) -> CompiledGrammar:
        """Compile the generic JSON grammar for ``schema``'s top-level type."""
        raise NotImplementedError

    def regex(self, pattern: str, timeout_s: float) -> CompiledGrammar:
        """Compile a regex the whole output must match (a regex request has no ladder: exact
        or a request error)."""
        raise NotImplementedError

    def precheck(self, schema: Any) -> str | None:
        """A reason the exact rung cannot be exact for ``schema`` (checked before compiling)."""
        return None

    def start_exact(self, schema: Any, text: str | None = None) -> cf.Future[CompiledGrammar] | None:
        """The exact compile, started now to overlap the caller's admission checks, or None
        where that gains nothing (then :func:`climb` compiles the exact rung itself);
        ``text``: ``schema`` serialized."""
        return None


class LLGuidanceLadder(LadderEngine):
    """The ladder on llguidance: exact JSON options, then ``lenient`` + ``coerce_one_of``."""

    name = "llguidance"

    def __init__(self, backend: LLGuidanceEngine, options: CompileOptions) -> None:
        self.backend = backend
        self.any_order = options.property_order == "any"

    def build_exact(self, schema: Any, *, text: str | None = None,
                    released: Callable[[], None] | None = None) -> CompiledGrammar:
        """The exact grammar, on the calling thread: objects in any order when so configured.
        ``text``: ``schema`` serialized; ``released``: see
        :meth:`~.llguidance_engine.LLGuidanceEngine.compile_json_schema`."""
        guarded = guard_patterns(schema, text)
        text = text if guarded is schema else None
        if self.any_order:
            return self._free_order(guarded, text, released)
        try:
            return self.backend.compile_json_schema(guarded, text=text, released=released)
        except EngineCompileError:
            # Schema order, refused by the JSON compiler (contains, a recursive intersection):
            # the any-order grammar is exact too (it only also takes other key orders).
            found = self._any_order(guarded)
            if found is None:
                raise
            return found

    def _free_order(self, schema: Any, text: str | None,
                    released: Callable[[], None] | None) -> CompiledGrammar:
        """``property_order="any"``'s exact grammar: the any-order grammar, or the JSON Schema
        itself where no object has an order to free.  Raise EngineCompileError (reason
        ``property_order_fixed``) where some object would keep the schema's order: a grammar
        that rejects valid key orders is not exact in this mode (the relaxed rung serves it)."""
        fixed = False
        for merge in (True, False):
            found = any_order_translation(schema, self.backend.exact_json, merge=merge)
            # A translation the engine refuses leaves the JSON Schema: objects in schema order.
            fixed = fixed or found.fixed or found.text is not None
            if found.text is None:
                break  # (merging changes nothing then)
            if not found.fixed:
                try:
                    return self.backend.compile_lark(found.text, released)
                except EngineCompileError:
                    pass
        if fixed:
            # The JSON Schema's own refusal, if any, names the unsupported part first.
            self.backend.compile_json_schema(schema, text=text)
            raise EngineCompileError(PROPERTY_ORDER_FIXED)
        return self.backend.compile_json_schema(schema, text=text, released=released)

    def _any_order(self, schema: Any, released: Callable[[], None] | None = None) -> CompiledGrammar | None:
        """The any-order grammar: conjunctions merged into rules first; if a merged part leaves
        the engine a leaf it refuses, the same translation without merging; None when neither
        compiles (the JSON Schema's own error then names the unsupported part)."""
        for merge in (True, False):
            found = any_order_translation(schema, self.backend.exact_json, merge=merge)
            if found.text is not None:
                try:
                    return self.backend.compile_lark(found.text, released)
                except EngineCompileError:
                    pass
        return None

    def start_exact(self, schema: Any, text: str | None = None) -> cf.Future[CompiledGrammar]:
        """Start the exact compile on a compile thread and return once it runs without the GIL
        (llguidance builds its matcher without it), so that the caller's Python checks run
        alongside: started and left to wait for the GIL, the compile would begin only after
        them (the caller holds the GIL until it blocks), ~60 µs of checks added to every compile."""
        released = threading.Event()
        future = submit(lambda: self.build_exact(schema, text=text, released=released.set))
        future.add_done_callback(lambda _f: released.set())  # (refused before the engine's build)
        # Bounded: with every compile thread busy the compile waits its turn, the caller does not.
        released.wait(_RELEASE_WAIT_S)
        return future

    def exact(self, schema: Any, timeout_s: float) -> CompiledGrammar:
        return run_with_timeout(lambda: self.build_exact(schema), timeout_s)

    def relaxed(self, schema: Any, timeout_s: float) -> CompiledGrammar:
        return run_with_timeout(lambda: self._relaxed(schema), timeout_s)

    def _relaxed(self, schema: Any) -> CompiledGrammar:
        # In any order, the any-order grammar with some objects in schema order (sound, and
        # free wherever it can be) before the lenient JSON grammar (schema order everywhere).
        found = self._any_order(guard_patterns(schema)) if self.any_order else None
        return found if found is not None else self.backend.compile_json_schema(schema, RELAXED_COMPILE)

    def generic(self, schema: Any, timeout_s: float) -> CompiledGrammar:
        return run_with_timeout(lambda: self.backend.compile_json_schema(generic_schema(schema)),
                                timeout_s)

    def regex(self, pattern: str, timeout_s: float) -> CompiledGrammar:
        return run_with_timeout(lambda: self.backend.compile_regex(pattern), timeout_s)


class OutlinesLadder(LadderEngine):
    """The ladder on outlines-core: exact only when it enforces every keyword present."""

    name = "outlines"

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def precheck(self, schema: Any) -> str | None:
        from .engines.outlines_engine import unsupported_keywords

        missing = unsupported_keywords(schema)
        return f"unsupported_keyword:{missing[0]}" if missing else None

    def exact(self, schema: Any, timeout_s: float) -> CompiledGrammar:
        return self.backend.compile_json_schema(schema, SchemaCompileOptions(timeout_s=timeout_s))

    # outlines-core drops what it does not know by itself: the relaxed rung is the same build.
    relaxed = exact

    def generic(self, schema: Any, timeout_s: float) -> CompiledGrammar:
        return self.backend.compile_json_schema(generic_schema(schema),
                                                SchemaCompileOptions(timeout_s=timeout_s))

    def regex(self, pattern: str, timeout_s: float) -> CompiledGrammar:
        # The backend bounds the compile in its worker process itself.
        return self.backend.compile_regex(pattern, timeout_s)


# Share of the time limit each rung may use up to (the generic rung is cheap and cached).
_RUNG_BUDGET = {Rung.EXACT: 0.8, Rung.RELAXED: 0.9, Rung.GENERIC_JSON: 1.0}


def climb(engine: LadderEngine, schema: Any, start: float, timeout_s: float, *,
          exact_future: cf.Future[CompiledGrammar] | None = None,
          start_reason: str | None = None, generic_cache: dict[str, CompiledGrammar] | None = None,
          ) -> LadderResult:
    """Try each rung until one compiles within its share of ``timeout_s`` from ``start``.

    ``exact_future`` is an exact-rung compile already running (started before the admission
    checks, to overlap them); ``start_reason`` skips the exact and relaxed rungs (e.g. the schema
    is over the size limits).  ``generic_cache`` keeps generic grammars by top-level type.
    """
    def left(rung: Rung) -> float:
        return start + timeout_s * _RUNG_BUDGET[rung] - time.perf_counter()

    reason = start_reason or engine.precheck(schema)
    rungs: list[tuple[Rung, Attempt]] = [(Rung.GENERIC_JSON, engine.generic)]
    if start_reason is None:
        try:
            grammar: CompiledGrammar | None = None
            if exact_future is not None:
                budget = left(Rung.EXACT)
                if budget <= 0:
                    # Past the deadline already (the caller's checks count too): a timeout,
                    # whether or not the compile has finished meanwhile.
                    exact_future.cancel()
                    raise cf.TimeoutError
                grammar = exact_future.result(timeout=budget)
            elif reason is None:
                grammar = engine.exact(schema, left(Rung.EXACT))
            if grammar is not None and reason is None:
                return LadderResult(Rung.EXACT, grammar, None)
        except cf.TimeoutError:
            reason = "compile_timeout"
        except WorkerLimitError as exc:
            reason = exc.reason
        except EngineCompileError as exc:
            reason = failure_reason(exc.message, schema)
        rungs.insert(0, (Rung.RELAXED, engine.relaxed))
    generic_key = json.dumps(generic_schema(schema), sort_keys=True)
    for rung, attempt in rungs:
        if rung is Rung.GENERIC_JSON and generic_cache is not None and generic_key in generic_cache:
            return LadderResult(rung, generic_cache[generic_key], reason)
        budget = left(rung)
        if budget <= 0:
            reason = reason or "compile_timeout"
            continue
        try:
            grammar = attempt(schema, budget)
        except WorkerLimitError as exc:
            reason = reason or exc.reason
            continue
        except EngineCompileError as exc:
            reason = reason or failure_reason(exc.message, schema)
            continue
        if rung is Rung.GENERIC_JSON and generic_cache is not None:
            generic_cache[generic_key] = grammar
        return LadderResult(rung, grammar, reason)
    return LadderResult(Rung.UNCONSTRAINED, None, reason or "compile_error")
