"""``X-AFM-Constraint-Mode``: how a constrained response's constraint was enforced.

Every response whose output is constrained (``response_format`` JSON, a dialect constraint
field, tools the model may call) names the rung of the downgrade ladder that served it:
``exact``, ``relaxed``, ``generic_json`` or ``unconstrained`` (no mask: free text, sanitized
when JSON was asked for).  With several constraints (tools and a ``response_format``), the
weakest is named; under ``tool_choice`` required or named only the calls count (no answer can
be written).  Unlike ``X-Grammar-Constraints: downgraded``, which concerns strict requests
only, this header is also set for ``json_object``, non-strict schemas and non-strict tools: a
non-strict tool schema served as generic JSON is visible here.
"""

from __future__ import annotations

from typing import Any

from afm_struct.grammar.spec import Mode, Rung
from afm_struct.tools import ToolPlan

from .structured import StructuredPlan

HEADER = "X-AFM-Constraint-Mode"
# Weakest last: the order a request's constraints are compared in.
ORDER: tuple[Rung, ...] = (Rung.EXACT, Rung.RELAXED, Rung.GENERIC_JSON, Rung.UNCONSTRAINED)


def _rung_of(compiled: Any) -> Rung:
    """The rung a compiled constraint runs at (a test's stand-in compiler may give only a mode)."""
    rung = getattr(compiled, "rung", None)
    if rung is not None:
        return Rung(rung)
    if getattr(compiled, "new_matcher", None) is not None and compiled.new_matcher() is None:
        return Rung.UNCONSTRAINED
    return Rung.EXACT if Mode(compiled.mode) is Mode.ENFORCED else Rung.RELAXED


def output_rung(plan: StructuredPlan) -> Rung | None:
    """The rung serving the output constraint (None: free text was asked for)."""
    if plan.constraint is None:
        return Rung.UNCONSTRAINED if plan.json_output else None
    return _rung_of(plan.constraint)


def tools_rung(tools: ToolPlan | None) -> Rung | None:
    """The weakest rung among the tool grammar's tools (None: no call is constrained)."""
    if tools is None or tools.constraint is None:
        return None
    rungs = [Rung(r) for r in (*tools.rungs.values(), *tools.guided.values())]
    if tools.constraint.grammar is None:  # the tool grammar itself got no mask
        rungs.append(Rung.UNCONSTRAINED)
    return max(rungs, key=ORDER.index, default=Rung.EXACT)


def calls_only(tools: ToolPlan | None) -> bool:
    """True when the tool grammar allows calls alone (``tool_choice`` required or named): no
    answer can be written, so the output format constrains nothing."""
    return (tools is not None and tools.constraint is not None
            and tools.choice.kind in ("required", "function"))


def constraint_mode(plan: StructuredPlan, tools: ToolPlan | None) -> Rung | None:
    """The weakest rung among the request's constraints (None: nothing constrains the output).
    With tools and a JSON format in one grammar (:attr:`ToolPlan.answered`) both branches
    count: ``exact`` only when the answer and every call are."""
    if calls_only(tools):
        answer = None
    elif tools is not None and tools.answered and tools.answer_rung is not None:
        answer = Rung(tools.answer_rung)  # as embedded (a relaxed schema may go in as generic JSON)
    else:
        answer = output_rung(plan)
    rungs = [r for r in (answer, tools_rung(tools)) if r is not None]
    return max(rungs, key=ORDER.index) if rungs else None


def mode_headers(plan: StructuredPlan, tools: ToolPlan | None) -> dict[str, str]:
    """``{HEADER: mode}`` for a constrained response, else nothing."""
    mode = constraint_mode(plan, tools)
    return {} if mode is None else {HEADER: mode.value}
