"""A forward pass that projects to the vocabulary only where logits are needed.

A model's ``__call__`` applies the LM head (hidden -> vocabulary) at every position it is fed.
Decoding needs logits at one position per row: the last prompt token, or the last token of a
fast-forwarded run.  On the embedded model the head is 576 x 49152, about 56 MFLOP per position,
so a 300-token prompt tail or an 8-row x 5-token fast-forward step spent most of its time on logits
it threw away.  For model families whose ``__call__`` is exactly "body, then head", run the body,
gather the wanted positions and apply the head to those rows only; any other model is called whole
and the positions gathered afterwards (same result, no saving).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import mlx.core as mx

# mlx-lm model modules whose Model.__call__ is ``head(self.model(inputs, cache))`` with the head
# ``embed_tokens.as_linear`` (tied) or ``lm_head``: no soft-capping or scaling after the head.
_BODY_THEN_HEAD = frozenset({
    "mlx_lm.models.llama", "mlx_lm.models.qwen2", "mlx_lm.models.qwen3", "mlx_lm.models.phi3",
})

Head = Callable[[mx.array], mx.array]


def split_head(model: Any) -> Head | None:
    """The LM head of a model whose forward pass is body then head, or None if not known to be."""
    if type(model).__module__ not in _BODY_THEN_HEAD or not hasattr(model, "model"):
        return None
    args = getattr(model, "args", None)
    if getattr(args, "tie_word_embeddings", False):
        return model.model.embed_tokens.as_linear
    head = getattr(model, "lm_head", None)
    return head if callable(head) else None


def logits_at(model: Any, head: Head | None, tokens: mx.array, cache: list[Any],
              last: list[int] | None = None) -> mx.array:
    """``(rows, V)`` logits of ``tokens`` (``(rows, L)``) at position ``last[i]`` of row i.

    ``last`` defaults to the final position of every row.  The cache is advanced by all ``L``
    positions either way.
    """
    length = tokens.shape[1]
    body = model.model if head is not None else model
    out = body(tokens, cache=cache)
    if last is None or all(p == length - 1 for p in last):
        picked = out[:, -1, :]
    else:
        picked = mx.take_along_axis(out, mx.array(last)[:, None, None], axis=1)[:, 0, :]
    return head(picked) if head is not None else picked


def calibrate_fixed_cost(model: Any, head: Head | None, make_cache: Callable[[], list[Any]]) -> float:
    """Time 1-token and 16-token forward passes: fixed cost / per-position cost."""
    def timed(n: int) -> float:
        best = float("inf")
        for _ in range(3):
            cache = make_cache()
            t0 = time.perf_counter()
            mx.eval(logits_at(model, head, mx.zeros((1, n), dtype=mx.int32), cache))
            best = min(best, time.perf_counter() - t0)
        return best

    timed(1)  # warm-up
    one, sixteen = timed(1), timed(16)
    per_position = max((sixteen - one) / 15, 1e-9)
    return max((one - per_position) / per_position, 1.0)


# A packed ragged step feeds each row at most this many pending tokens (bounds a step's time
# when a row has a long forced run or prompt tail).
PACKED_FEED_MAX = 32


def feed_length(lengths: list[int], *, packed: bool, fixed: Callable[[], float]) -> int:
    """How many pending tokens each row feeds this step.

    A forward pass costs about ``fixed + rows * length`` (in positions): its fixed part
    (reading the weights) is what fast-forward amortizes, but padding rows to the longest
    forced run costs compute.  Pick the length that maximizes useful tokens per cost.
    ``fixed()`` is called only where the choice needs it (its first call measures the model).
    """
    longest = max(lengths)
    if len(lengths) == 1 or longest == 1 or len(set(lengths)) == 1:
        return longest
    if packed:  # a packed pass costs the tokens fed, not rows x longest
        return min(longest, PACKED_FEED_MAX)
    cost = fixed()
    best, best_rate = 1, 0.0
    for cand in sorted(set(lengths)):
        rate = sum(min(n, cand) for n in lengths) / (cost + len(lengths) * cand)
        if rate > best_rate:
            best, best_rate = cand, rate
    return best
