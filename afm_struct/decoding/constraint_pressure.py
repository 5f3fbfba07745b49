"""Constraint pressure: the probability mass a grammar mask removed at one decoding step.

For a row the mask constrained, the pressure is the total probability the model's own,
unmasked distribution (its raw logits at temperature 1, before processors and filters) gave
to tokens the mask disallowed: ``1 - sum(softmax(raw)[allowed])``.  0 means the model already
wanted only what the grammar allows; near 1, the grammar overrode what the model preferred.  A
row the mask did not constrain this step (free text, a mask allowing every token) has pressure 0.  Tokens the
grammar forced are never scored: the model's logits at their positions are not computed
(fast-forward), so they carry no pressure (``None``).

Opt-in per request (``GenerationRequest.token_details``): rows that did not ask pay nothing;
the rows that did pay one exponential pass over their logits each, read in the sampling's one
sync.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx


def pressure_array(raw: Sequence[mx.array], masked: Sequence[mx.array]) -> mx.array:
    """Lazy ``(R,)`` pressures of rows whose unmasked ``(1, V)`` logits are ``raw`` and masked
    ones ``masked`` (disallowed tokens at -inf): per row, one exponential pass over the raw
    logits, summed whole and over the allowed tokens, ``1 - kept / total``.

    Row by row, evaluated together: stacking the rows first (one ``(2R, V)`` array, two
    log-sum-exps) measured several times slower at 32 rows on this project's 2-core machine
    (~840 ms against ~40 ms a step at a 49k vocabulary, under load:
    benchmarks/token_details/README.md)."""
    return mx.stack([_pressure(r, m) for r, m in zip(raw, masked, strict=True)])


def _pressure(raw: mx.array, masked: mx.array) -> mx.array:
    from ..models import cpu_exp

    logits = raw.astype(mx.float32)
    shifted = logits - mx.max(logits, axis=-1, keepdims=True)
    weights = cpu_exp.exp(shifted) if cpu_exp.wanted() else mx.exp(shifted)
    total = mx.sum(weights)
    kept = mx.sum(mx.where(masked == float("-inf"), 0.0, weights))
    return mx.clip(1.0 - kept / total, 0.0, 1.0)


def read_pressures(values: mx.array) -> list[float]:
    """The evaluated :func:`pressure_array` as floats, rounded to what a float32 sum can tell
    apart from 0 (a mask that removed only ~1e-38 of mass removed nothing)."""
    return [0.0 if v < 1e-6 else round(float(v), 6) for v in values.tolist()]
