"""Greedy picks read from evaluated CPU logits in place, the rows of one batch in one numpy call.

A forward pass gives a group's logits as one ``(B, V)`` array and each row a ``(1, V)`` slice of
it.  Evaluating and reading those slices one by one cost a lazy MLX slice evaluation and a
numpy view per row per step (~30 µs a row at 32 rows, issue 40), and an allowed-token list's
argmax (``mask_tokens``) cost a gather and an argmax op in MLX per row.  On the CPU device the
batch array is evaluated once and numpy reads it in place: one ``argmax(axis=-1)`` over the rows
that need the argmax of all their logits, and a fancy-indexed argmax over each short allowed
list.  Same tokens: numpy's and MLX's argmax both take the first maximum, and row ``i`` of the
batch is, element for element, the row's own slice.

A row's ``logits_row`` is trusted only while ``logits`` is still the very slice it was made
with, so any code that sets ``logits`` another way falls back to the row's own array.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx
import numpy as np

from .sequence import SequenceState

# Below this share of a batch's rows wanting a whole-row argmax, argmaxes go row by row (an
# argmax over the whole batch would read rows nobody asked for).
_WHOLE_BATCH_SHARE = 0.5


def take_row(seq: SequenceState, out: mx.array | None, i: int) -> None:
    """Give ``seq`` row ``i`` of a pass's ``(B, V)`` logits, remembering the batch array
    (``out`` None: no logits this step)."""
    if out is None:
        seq.logits = seq.logits_row = None
        return
    view = out[i:i + 1]
    seq.logits = view
    seq.logits_row = (out, i, view) if out.ndim == 2 else None


def _batch_row(seq: SequenceState) -> tuple[mx.array, int] | None:
    """(batch logits, row) when ``seq.logits`` is still that batch's row slice."""
    held = getattr(seq, "logits_row", None)  # (test stand-ins of a row may not have one)
    if held is None or held[2] is not seq.logits:
        return None
    return held[0], held[1]


def sources(rows: Sequence[SequenceState], which: Sequence[int]) -> list[mx.array]:
    """What to evaluate so that rows ``which`` can be read on the host: each batch array once,
    and the own logits of rows that have no batch array."""
    out: dict[int, mx.array] = {}
    for i in which:
        held = _batch_row(rows[i])
        arr = held[0] if held is not None else rows[i].logits
        assert arr is not None
        out.setdefault(id(arr), arr)
    return list(out.values())


def host_row(seq: SequenceState) -> np.ndarray:
    """``seq``'s evaluated logits as a ``(V,)`` numpy view (no copy)."""
    held = _batch_row(seq)
    if held is not None:
        return np.asarray(held[0])[held[1]]
    assert seq.logits is not None
    return np.asarray(seq.logits)[0]


def whole_argmaxes(rows: Sequence[SequenceState], which: Sequence[int]) -> dict[int, int]:
    """Row -> the argmax of all its (evaluated) logits, for rows ``which``."""
    picks: dict[int, int] = {}
    by_batch: dict[int, tuple[mx.array, list[tuple[int, int]]]] = {}
    for i in which:
        held = _batch_row(rows[i])
        if held is None:
            picks[i] = int(np.argmax(host_row(rows[i])))
            continue
        by_batch.setdefault(id(held[0]), (held[0], []))[1].append((i, held[1]))
    for batch, members in by_batch.values():
        table = np.asarray(batch)
        if len(members) >= _WHOLE_BATCH_SHARE * table.shape[0]:
            best = np.argmax(table, axis=-1)
            for i, k in members:
                picks[i] = int(best[k])
        else:
            for i, k in members:
                picks[i] = int(np.argmax(table[k]))
    return picks


def listed_argmax(seq: SequenceState, ids: np.ndarray) -> int:
    """The first of ``ids`` (allowed token ids, all below the vocabulary) with the largest
    logit of ``seq``'s evaluated logits."""
    return int(ids[int(np.argmax(host_row(seq)[ids]))])
