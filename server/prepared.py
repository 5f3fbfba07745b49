"""An admissible request, rendered and compiled but not yet submitted: :class:`Prepared`.

:mod:`server.admission` makes one (``prepare``) and :mod:`server.run` runs it; the value has
its own module so that the run never imports admission, which builds runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from afm_struct.decoding.reasoning_gate import ReasoningTags
from afm_struct.decoding.requests import GenerationRequest
from afm_struct.serving.plan import GenerationPlan
from afm_struct.serving.reasoning_budget import DefaultReasoningBudget
from afm_struct.tools import ToolPlan
from afm_struct.turn.events import ResponseIdentity

from .profile import TokenCounter
from .structured import StructuredPlan


@dataclass
class Prepared:
    """An admissible request, not yet submitted."""

    plan: GenerationPlan
    ident: ResponseIdentity
    generation: GenerationRequest
    structured: StructuredPlan
    counter: TokenCounter
    started: float
    reasoning: ReasoningTags | None = None
    tools: ToolPlan | None = None
    # The default thinking budget applied (a constrained request that set none), for its header.
    default_reasoning: DefaultReasoningBudget | None = None

    @property
    def downgraded(self) -> bool:
        """A strict schema or strict tool grammar runs best-effort (``X-Grammar-Constraints``).

        Each plan decided its own flag by :func:`afm_struct.grammar.downgrade.is_downgraded`; the
        response is downgraded when either is.
        """
        return self.structured.downgraded or bool(self.tools and self.tools.downgraded)
