"""Scaled dot-product attention for the CPU device, with a softmax MLX can run fast there.

``mx.fast.scaled_dot_product_attention`` has no kernel of its own on the CPU: it falls back to
matmul, softmax, matmul, and the softmax's exponentials run one float at a time (see
``cpu_exp``): in a decode step of 8 sequences they were most of the attention cost (~0.47 ms
per layer, 30 layers).  Here the softmax takes :func:`afm_struct.models.cpu_exp.exp`, and
grouped-query heads share their key/value head without repeating it.

Only between two sizes (see ``MIN_SCORES``/``MAX_SCORES``): a batch of decode rows, a
fast-forward run, a prefill chunk; a single decode row, very long prefills, quantized caches
and other devices keep mlx-lm's path.  ``AFM_STRUCT_CPU_EXP=0`` turns it off."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx_lm.models.base import scaled_dot_product_attention as mlx_lm_sdpa

from . import cpu_exp

# Scores per call: below MIN the few exponentials cost less than this path's extra ops (one
# decode row over ~150 keys ran ~10% slower here), above MAX the materialized softmax would
# hold too much memory.
MIN_SCORES = cpu_exp.MIN_ELEMENTS
MAX_SCORES = 4 * 1024 * 1024
_MASKED = -1e30


def attention(queries: mx.array, keys: mx.array, values: mx.array, scale: float,
              mask: Any = None) -> mx.array:
    """Same as ``mx.fast.scaled_dot_product_attention`` (``mask``: None, ``"causal"``, a boolean
    array, True where a query sees a key, or an additive array), for ``(B, H, L, D)`` inputs
    whose key/value heads divide the query heads."""
    b, hq, lq, d = queries.shape
    hk, lk = keys.shape[1], keys.shape[2]
    group = hq // hk
    # Query heads h*group .. h*group+group-1 read key/value head h (mlx-lm's head layout).
    scores = (queries * scale).reshape(b, hk, group * lq, d) @ keys.swapaxes(-1, -2)
    if mask is not None:
        scores = scores.reshape(b, hk, group, lq, lk)
        if isinstance(mask, str):  # "causal", aligned to the last key
            mask = mx.arange(lk)[None] <= mx.arange(lq)[:, None] + (lk - lq)
        elif mask.ndim == 4:
            mask = mask[:, :, None] if mask.shape[1] == 1 else mask.reshape(mask.shape[0], hk, group, lq, lk)
        if mask.dtype == mx.bool_:
            scores = mx.where(mask, scores, _MASKED)
        else:
            scores = scores + mask
        scores = scores.reshape(b, hk, group * lq, lk)
    weights = cpu_exp.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = weights / weights.sum(axis=-1, keepdims=True)
    return (weights @ values).reshape(b, hq, lq, d)


def wanted() -> bool:
    """Whether this attention runs here (see :func:`afm_struct.models.cpu_exp.wanted`)."""
    return cpu_exp.wanted()


def scaled_dot_product_attention(queries: mx.array, keys: mx.array, values: mx.array, *, cache: Any,
                                 scale: float, mask: Any, enabled: bool) -> mx.array:
    """mlx-lm's attention entry point, routed to :func:`attention` when ``enabled`` and the
    step is small enough; otherwise mlx-lm's own."""
    b, hq, lq, _ = queries.shape
    hk, lk = keys.shape[1], keys.shape[2]
    if (enabled and not hasattr(cache, "bits") and hq % hk == 0
            and MIN_SCORES <= b * hq * lq * lk <= MAX_SCORES):
        return attention(queries, keys, values, scale, mask)
    return mlx_lm_sdpa(queries, keys, values, cache=cache, scale=scale, mask=mask)
