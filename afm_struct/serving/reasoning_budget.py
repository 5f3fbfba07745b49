"""The default thinking budget of a constrained request: reasoning never starves the answer.

A thinking model (Qwen3's ``<think>``, gpt-oss's analysis channel) may reason until
``max_tokens``; a constrained answer is then only the closer's shortest valid stub.  When a
request is constrained (``json_schema``, ``json_object``, tools) and the model thinks, and the
request set no budget itself (chat's ``max_reasoning_tokens``, Responses' ``reasoning.effort``),
thinking may take at most half of the completion budget, and never the tokens the answer's
shortest valid form needs.  When ``max_tokens`` leaves less than :data:`MIN_THINKING` tokens to
think, the response says so (``X-AFM-Reasoning-Budget``), rather than an error: the answer still
fits.
"""

from __future__ import annotations

from dataclasses import dataclass

# The share of max_tokens thinking may take by default: the rest is the answer's.
THINKING_SHARE = 0.5
# Below this many thinking tokens the budget is called too small for both in the header.
MIN_THINKING = 16
HEADER = "X-AFM-Reasoning-Budget"


@dataclass(frozen=True)
class DefaultReasoningBudget:
    """Thinking tokens allowed (``tokens``) out of ``max_tokens``, with ``answer_floor`` kept for
    the answer's shortest valid form."""

    tokens: int
    max_tokens: int
    answer_floor: int

    @property
    def too_small(self) -> bool:
        """``max_tokens`` cannot hold both a useful thought and the answer."""
        return self.tokens < MIN_THINKING

    def header(self) -> str:
        """The ``X-AFM-Reasoning-Budget`` value: the tokens, where they came from, and a plain
        note when ``max_tokens`` is too small for both."""
        value = f"{self.tokens}; source=default; max_tokens={self.max_tokens}"
        if self.too_small:
            value += (f"; note=\"max_tokens leaves {self.tokens} tokens to think (the answer needs at "
                      f"least {self.answer_floor}); raise max_tokens or set max_reasoning_tokens\"")
        return value


def default_reasoning_budget(max_tokens: int, answer_floor: int) -> DefaultReasoningBudget:
    """Thinking tokens for a constrained request that set none: at most ``THINKING_SHARE`` of
    ``max_tokens`` and never into the ``answer_floor`` tokens the answer's shortest valid form
    takes (the close tag's tokens come out of the answer's half)."""
    share = int(max_tokens * THINKING_SHARE)
    return DefaultReasoningBudget(tokens=max(0, min(share, max_tokens - answer_floor)),
                                  max_tokens=max_tokens, answer_floor=answer_floor)
