"""``minProperties`` / ``maxProperties`` in the any-order grammar, as conditions on its parameter.

An any-order object rule (:mod:`.any_order`) keeps one bit per declared key; extra keys (from
``additionalProperties`` or a pattern) leave no bit, so where a count is bounded they step a
small counter in the bits above (llguidance's saturating ``incr([x:y])``).  The number of keys
is then ``bit_count(declared bits) + counter``: a sum llguidance cannot compare at once, so the
conditions spell it as "j declared keys and the counter at most / at least k - j" over j.

A key beyond the required ones is admitted only while the object can still close: its count
plus the required keys still missing stays within ``maxProperties`` (the required keys hold
bits ``0..r-1``, so that is ``bit_count(optional bits) + counter < max - r``).  llguidance's
JSON compiler has neither keyword, so this is also the only exact form of them.
"""

from __future__ import annotations

from typing import Any

from .key_presence import FALSE, TRUE, all_of, any_of

_MAX_BITS = 64


def count_bounds(schema: dict[str, Any]) -> tuple[int, int | None] | None:
    """``(minProperties, maxProperties)``; None when either is not a non-negative integer."""
    lo, hi = schema.get("minProperties", 0), schema.get("maxProperties")
    for v in (lo, hi):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or v < 0
                              or (isinstance(v, float) and not v.is_integer())):
            return None
    return int(lo), None if hi is None else int(hi)


def counter_width(lo: int, hi: int | None) -> int:
    """Bits a counter needs to tell every count the bounds compare against (0: no bounds)."""
    top = max(lo, hi or 0)
    return top.bit_length() if lo or hi is not None else 0


def fits(declared: int, width: int) -> bool:
    """Whether ``declared`` key bits and a ``width``-bit counter fit the rule parameter."""
    return declared + width <= _MAX_BITS


def _sum_conditions(bits: tuple[int, int], counter: tuple[int, int] | None, limit: int, op: str) -> str:
    """``bit_count(bits) + counter`` compared with ``limit`` (``op``: "le" or "ge")."""
    lo_bit, hi_bit = bits
    width = hi_bit - lo_bit
    if op == "le" and limit < 0:
        return FALSE
    if op == "ge" and limit <= 0:
        return TRUE
    if counter is None:
        if width == 0:
            return TRUE if op == "le" else FALSE
        return f"bit_count_{op}([{lo_bit}:{hi_bit}], {limit})"
    count = f"[{counter[0]}:{counter[1]}]"
    if width == 0:
        return f"{op}({count}, {limit})"
    span = f"[{lo_bit}:{hi_bit}]"
    if op == "le":  # j declared keys (j ≤ limit) and the counter at most limit - j
        return any_of([f"and(bit_count_eq({span}, {j}), le({count}, {limit - j}))"
                       for j in range(min(width, limit) + 1)])
    # at least `limit` declared keys, or j < limit of them and the counter at least limit - j
    return any_of([f"bit_count_ge({span}, {limit})",
                   *(f"and(bit_count_eq({span}, {j}), ge({count}, {limit - j}))"
                     for j in range(min(width, limit - 1) + 1))])


def count_conditions(required: int, declared: int, counter: tuple[int, int] | None, lo: int,
                     hi: int | None) -> tuple[str | None, str | None]:
    """``(end, guard)``: the condition to close the object (at least ``lo`` keys; None: no
    bound) and the one to add a key beyond the ``required`` ones (None: no bound).

    Keys ``0..required-1`` are the required declared ones, ``required..declared-1`` the
    optional ones; ``counter`` the bit range counting extra keys (None: no extra key)."""
    end = guard = None
    if lo > 0:
        end = _sum_conditions((0, declared), counter, lo, "ge")
    if hi is not None:
        if hi < required:
            end = FALSE
        guard = _sum_conditions((required, declared), counter, hi - required - 1, "le")
    return end, guard


def guarded(condition: str | None, guard: str | None) -> str:
    """A member's ``%if`` suffix: its own condition and the count guard, either may be None."""
    parts = [c for c in (condition, guard) if c is not None]
    return f" %if {all_of(parts)}" if parts else ""
