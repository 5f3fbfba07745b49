"""The AFM extensions a request turns on by header, beside what its body says: partial values
(``X-AFM-Partial``, the Messages door's way; chat and the Responses API also take
``stream_options.include_partial``), the enforcement report (``X-AFM-Enforcement``) and
token details (``X-AFM-Token-Details`` or chat's ``stream_options.include_token_details``;
written by chat's encoders only).

Headers, as ``X-AFM-Profile``: every door reads them the same way, and no client library's body
type has to learn a field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from afm_struct.grammar.enforcement import enforcement_report
from afm_struct.grammar.spec import Rung
from afm_struct.serving.plan import GenerationPlan

from .structured import StructuredPlan

PARTIAL_HEADER = "x-afm-partial"
TOKEN_DETAILS_HEADER = "x-afm-token-details"
ENFORCEMENT_HEADER = "x-afm-enforcement"
_ON = ("true", "1", "yes", "on")


def header_on(value: str | None) -> bool:
    """A boolean extension header's value (absent or anything but true/1/yes/on: off)."""
    return (value or "").strip().lower() in _ON


def with_extensions(plan: GenerationPlan, headers: Mapping[str, str], *,
                    include_partial: bool = False, token_details: bool = False) -> GenerationPlan:
    """``plan`` with the extensions its request's ``headers`` (or, for partial values and token
    details, its body: ``include_partial``, ``token_details``) asked for."""
    partial = include_partial or header_on(headers.get(PARTIAL_HEADER))
    enforcement = header_on(headers.get(ENFORCEMENT_HEADER))
    details = token_details or header_on(headers.get(TOKEN_DETAILS_HEADER))
    if not (partial or enforcement or details):
        return plan
    delivery = dataclasses.replace(plan.delivery, include_partial=partial, enforcement=enforcement,
                                   token_details=details)
    return dataclasses.replace(plan, delivery=delivery)


def format_enforcement(structured: StructuredPlan) -> dict[str, Any] | None:
    """The enforcement report of the request's output format as served (None: no format, or
    a compiler that keeps no schema, a test's stand-in).  A format run without its mask, a
    tool grammar owning it, is reported on the unconstrained rung."""
    compiled = structured.compiled
    if compiled is None or not hasattr(compiled, "rewrite_sites"):
        return None
    if structured.constraint is None:
        return enforcement_report(compiled, rung=Rung.UNCONSTRAINED, reason=structured.reason)
    return enforcement_report(compiled)
