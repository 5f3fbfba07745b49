"""``truncation: "auto"``: an input over the context loses its oldest turns until it fits.

The turns kept are the system turn (``instructions``), then every turn from a user turn on: a
cut falls only before a user turn, so an assistant's call is never kept without the turn that
asked for it nor a call's output without its call, and the last user turn always stays.  The
smallest cut that fits is found by bisection over those cut points (whether a prompt fits only
grows as turns are dropped), each probe the ordinary :func:`~server.admission.prepare`; no
cut fitting is the same 400 as ``truncation: "disabled"``.  How many turns were dropped is
stated in the ``X-AFM-Truncated-Turns`` header.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from afm_struct.errors import ContextOverflowError
from afm_struct.serving.plan import GenerationPlan

from ..admission import Prepared, prepare
from ..state import ServerState

TRUNCATED_HEADER = "X-AFM-Truncated-Turns"


def cut_points(turns: list[dict[str, Any]]) -> list[int]:
    """The indices a truncated conversation may resume at: each user turn after the first
    kept turn (a leading system turn always stays)."""
    lead = 1 if turns and turns[0].get("role") == "system" else 0
    return [i for i in range(lead + 1, len(turns)) if turns[i].get("role") == "user"]


def truncated(plan: GenerationPlan, start: int) -> GenerationPlan:
    """``plan`` with the turns before ``start`` dropped (a leading system turn kept)."""
    turns = plan.conversation.messages
    lead = turns[:1] if turns and turns[0].get("role") == "system" else []
    return replace(plan, conversation=replace(plan.conversation, messages=lead + turns[start:]))


async def prepare_fitting(state: ServerState, plan: GenerationPlan, *, auto: bool,
                          started: float | None = None) -> tuple[Prepared, int]:
    """``prepare(plan)``, and with ``auto`` the oldest turns dropped while the prompt cannot
    fit; returns the prepared request and how many turns were dropped (0: none)."""
    try:
        return await prepare(state, plan, started=started), 0
    except ContextOverflowError:
        if not auto:
            raise
        points = cut_points(plan.conversation.messages)
        if not points:
            raise
        first = plan.conversation.messages[0].get("role") == "system"
        best: tuple[Prepared, int] | None = None
        low, high = 0, len(points) - 1
        while low <= high:  # the earliest cut point whose prompt fits
            mid = (low + high) // 2
            try:
                prepared = await prepare(state, truncated(plan, points[mid]), started=started)
            except ContextOverflowError:
                low = mid + 1
                continue
            best, high = (prepared, points[mid] - int(first)), mid - 1
        if best is None:
            raise
        return best
