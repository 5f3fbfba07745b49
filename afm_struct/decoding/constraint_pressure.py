"""Constraint pressure: the probability mass a grammar mask removed at one decoding step.

For a row the mask constrained, the pressure is the total probability the model's own,
unmasked distribution (its raw logits at temperature 1, before processors and filters) gave
to tokens the mask disallowed: ``1 - sum(softmax(raw)[allowed])``, computed as
``1 - exp(logsumexp(masked) - logsumexp(raw))``.  0 means the model already wanted only what
the grammar allows; near 1, the grammar overrode what the model preferred.  A row the mask did
not constrain this step (free text, a mask allowing every token) has pressure 0.  Tokens the
grammar forced are never scored: the model's logits at their positions are not computed
(fast-forward), so they carry no pressure (``None``).

Opt-in per request (``GenerationRequest.token_details``): rows that did not ask pay nothing;
the rows that did share one batched pair of log-sum-exps, read in the sampling's one sync.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx

from .logprobs import row_logsumexp


def pressure_array(raw: Sequence[mx.array], masked: Sequence[mx.array]) -> mx.array:
    """Lazy ``(R,)`` pressures of rows whose unmasked ``(1, V)`` logits are ``raw`` and masked
    ones ``masked`` (disallowed tokens at -inf), in one batched computation."""
    both = mx.concatenate([*raw, *masked], axis=0).astype(mx.float32)
    lse = row_logsumexp(both)[:, 0]
    n = len(raw)
    kept = mx.exp(lse[n:] - lse[:n])  # the allowed tokens' share of the unmasked mass
    return mx.clip(1.0 - kept, 0.0, 1.0)


def read_pressures(values: mx.array) -> list[float]:
    """The evaluated :func:`pressure_array` as floats, rounded to what a float32 sum can tell
    apart from 0 (a mask that removed only ~1e-38 of mass removed nothing)."""
    return [0.0 if v < 1e-6 else round(float(v), 6) for v in values.tolist()]
