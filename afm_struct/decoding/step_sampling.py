"""One step's sampling for a batch group: masks, processors, each row's sampler, logprobs.

The grammar masks of all rows are applied in one op (a bitmask row per sequence) before any
processor or sampling filter; then each row runs its own processors and seeded sampler.  Rows
whose request asked for logprobs also hand their processed distribution to one batched
log-softmax / top-n (:mod:`.logprobs`), read in the same synchronisation as the tokens; a step
where no row asked does exactly what it did before logprobs existed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import mlx.core as mx
import numpy as np

from .logprobs import RowStats, logprob_arrays, read_stats
from .masking import apply_bitmask
from .sequence import SequenceState


def sample_rows(rows: Sequence[SequenceState]) -> tuple[list[int], list[RowStats | None]]:
    """The next token of each row, and its logprob stats for the rows that asked (else None)."""
    logits = rows[0].logits if len(rows) == 1 else mx.concatenate([r.logits for r in rows], axis=0)
    assert logits is not None
    masked = [i for i, r in enumerate(rows) if r.matcher is not None and not r.mask_all]
    if masked:
        bitmask = np.full((len(rows), rows[masked[0]].mask.shape[1]), -1, dtype=np.int32)
        for i in masked:
            bitmask[i] = rows[i].mask[0]
        logits = apply_bitmask(logits, bitmask)
    picks = []
    asked: list[int] = []
    dists: list[mx.array] = []
    for i, r in enumerate(rows):
        row_logits = logits[i:i + 1]
        for proc in r.processors:
            row_logits = proc(r.tokens, row_logits)
        if r.request.logprobs is None:
            picks.append(r.sampler(row_logits))
            continue
        dist = r.sampler.distribution(row_logits)  # what the draw samples from
        picks.append(r.sampler.draw(dist))
        asked.append(i)
        dists.append(dist)
    tokens_arr = mx.concatenate(picks)
    stats: list[RowStats | None] = [None] * len(rows)
    if asked:
        wants = [rows[i].request.logprobs or 0 for i in asked]
        arrays = logprob_arrays(dists, tokens_arr[mx.array(asked)], max(wants))
        mx.eval(tokens_arr, *arrays)  # one sync for tokens and logprobs
        for i, s in zip(asked, read_stats(arrays, wants), strict=True):
            stats[i] = s
    tokens = tokens_arr.tolist()
    now = time.perf_counter()
    for r in rows:
        if r.timings.first_token_s is None:
            r.timings.first_token_s = now - r.started
    return [int(t) for t in tokens], stats
