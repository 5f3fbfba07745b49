"""One step's sampling for a batch group: masks, processors, each row's sampler, logprobs.

The grammar masks of all rows are applied in one op (a bitmask row per sequence) before any
processor or sampling filter; then each row runs its own processors and seeded sampler.  Rows
whose request asked for logprobs also hand their processed distribution to one batched
log-softmax / top-n (:mod:`.logprobs`), read in the same synchronisation as the tokens; a step
where no row asked does exactly what it did before logprobs existed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import mlx.core as mx
import numpy as np

from ..grammar.engine import mask_words
from .logprobs import RowStats, logprob_arrays, read_stats
from .masking import apply_bitmask
from .sequence import SequenceState


def _filled_together(rows: Sequence[SequenceState], bitmask: np.ndarray | None,
                     words: int) -> np.ndarray | None:
    """``bitmask[:len(rows)]`` when row i's mask is row i of it for every row (the group's
    masks as :meth:`MaskFiller.fill_rows` left them): applied as is, with no copy."""
    if bitmask is None or bitmask.shape[0] < len(rows) or bitmask.shape[1] != words:
        return None
    start, stride = bitmask.ctypes.data, bitmask.strides[0]
    for i, r in enumerate(rows):
        if r.matcher is None or r.mask is None or r.mask.ctypes.data != start + i * stride:
            return None
    return bitmask[:len(rows)]


def sample_rows(rows: Sequence[SequenceState], on_error: Callable[[int, Exception], None] | None = None,
                bitmask: np.ndarray | None = None) -> tuple[list[int], list[RowStats | None]]:
    """The next token of each row, and its logprob stats for the rows that asked (else None).

    A failure in one row's own part (its mask row, its processors, its sampler) goes to
    ``on_error(i, exc)`` and that row's token is -1; the other rows sample exactly as without
    it.  Without ``on_error`` such a failure is raised.  The stacked logits, the masking op and
    the one synchronisation are the group's: their failures are raised.  ``bitmask``: the
    group's (``BatchGroup.bitmask``), applied in place when the rows' masks are its rows in order.
    """
    failed: set[int] = set()

    def row_failed(i: int, exc: Exception) -> None:
        if on_error is None:
            raise exc
        failed.add(i)
        on_error(i, exc)

    logits = rows[0].logits if len(rows) == 1 else mx.concatenate([r.logits for r in rows], axis=0)
    assert logits is not None
    masked = [i for i, r in enumerate(rows) if r.matcher is not None and not r.mask_all]
    words = mask_words(logits.shape[-1])
    together = _filled_together(rows, bitmask, words) if masked else None
    if together is not None:
        logits = apply_bitmask(logits, together)
    elif masked:
        bitmask = np.full((len(rows), words), -1, dtype=np.int32)
        for i in masked:
            try:
                row = rows[i].mask[0][:words]
                bitmask[i] = 0  # tokens past a row's mask (a padded model vocabulary): disallowed
                bitmask[i, :row.shape[0]] = row
            except Exception as exc:
                bitmask[i] = -1
                row_failed(i, exc)
        logits = apply_bitmask(logits, bitmask)
    picks = []
    asked: list[int] = []
    dists: list[mx.array] = []
    for i, r in enumerate(rows):
        if i in failed:
            continue
        try:
            row_logits = logits[i:i + 1]
            for proc in r.processors:
                row_logits = proc(r.tokens, row_logits)
            if r.request.logprobs is None:
                picks.append(r.sampler(row_logits))
                continue
            dist = r.sampler.distribution(row_logits)  # what the draw samples from
            pick = r.sampler.draw(dist)
        except Exception as exc:
            row_failed(i, exc)
            continue
        picks.append(pick)
        asked.append(i)
        dists.append(dist)
    sampled = [i for i in range(len(rows)) if i not in failed]
    stats: list[RowStats | None] = [None] * len(rows)
    tokens = [-1] * len(rows)
    if not sampled:
        return tokens, stats
    tokens_arr = mx.concatenate(picks)
    if asked:
        wants = [rows[i].request.logprobs or 0 for i in asked]
        at = {row: k for k, row in enumerate(sampled)}
        arrays = logprob_arrays(dists, tokens_arr[mx.array([at[i] for i in asked])], max(wants))
        mx.eval(tokens_arr, *arrays)  # one sync for tokens and logprobs
        for i, s in zip(asked, read_stats(arrays, wants), strict=True):
            stats[i] = s
    for i, t in zip(sampled, tokens_arr.tolist(), strict=True):
        tokens[i] = int(t)
    now = time.perf_counter()
    for r in rows:
        if r.timings.first_token_s is None:
            r.timings.first_token_s = now - r.started
    return tokens, stats
