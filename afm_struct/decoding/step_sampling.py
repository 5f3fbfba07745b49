"""One step's sampling for a batch group: masks, processors, each row's sampler, logprobs.

The grammar masks of all rows are applied in one op (a bitmask row per sequence) before any
processor or sampling filter; then each row runs its own processors and seeded sampler.  Rows
whose request asked for logprobs also hand their processed distribution to one batched
log-softmax / top-n (:mod:`.logprobs`), read in the same synchronisation as the tokens; a step
where no row asked does exactly what it did before logprobs existed.

A greedy row whose processors change nothing this step (and no logprobs) needs only the argmax
of its allowed logits, so it skips the masking op, which on a CPU cost more than the sampling
itself (32 rows of a 128k vocabulary): a mask that lists its few allowed tokens
(``seq.mask_tokens``, a structural position) takes the argmax of those logits alone; another
takes the argmax of all its logits, which stands when its mask allows it (the first maximum
overall is then the first allowed one) and is redone on the masked logits when not.  Either way
the token is exactly the argmax of the masked logits.

On the CPU those whole-row argmaxes (every free greedy row, too) are taken by numpy on the
evaluated logits, read in place: MLX's CPU argmax cost ~90 µs a 49k row, numpy's ~6 µs, which
at 32 streams was most of a step's sampling (issue 40).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import mlx.core as mx
import numpy as np

from ..grammar.engines.protocol import buffer_address, mask_words
from .constraint_pressure import pressure_array, read_pressures
from .host_argmax import listed_argmax, sources, whole_argmaxes
from .logprobs import RowStats, logprob_arrays, read_stats
from .masking import allows_token, apply_bitmask
from .sampling import processors_idle
from .sequence import SequenceState


def _filled_together(rows: Sequence[SequenceState], bitmask: np.ndarray | None,
                     words: int) -> np.ndarray | None:
    """``bitmask[:len(rows)]`` when row i's mask is row i of it for every row (the group's
    masks as :meth:`MaskFiller.fill_rows` left them): applied as is, with no copy."""
    if bitmask is None or bitmask.shape[0] < len(rows) or bitmask.shape[1] != words:
        return None
    # (buffer_address: ``ndarray.ctypes.data`` cost ~1.5 µs a row, ~50 µs a step at 32 rows.)
    start, stride = buffer_address(bitmask), bitmask.strides[0]
    for i, r in enumerate(rows):
        if r.matcher is None or r.mask is None or buffer_address(r.mask) != start + i * stride:
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

    vocab = rows[0].logits.shape[-1]
    words = mask_words(vocab)
    masked = [i for i, r in enumerate(rows) if r.matcher is not None and not r.mask_all]
    argmax_only = {i for i in masked if _argmax_only(rows[i], row_failed, i)}
    on_host = _host_argmax(rows[0].logits)
    host: list[int] = []  # rows whose token is the argmax of all their logits, taken by numpy
    views = _masked_logits(rows, [i for i in masked if i not in argmax_only and i not in failed],
                           bitmask, words, row_failed)
    # Rows that asked for token details and were masked: the mass their mask removed, built
    # from the masked logits before any processor rebinds them (constraint_pressure.py).
    pressured = [i for i in views if _wants_details(rows[i])]
    pressures = (pressure_array([rows[i].logits for i in pressured], [views[i] for i in pressured])
                 if pressured else None)
    picks: dict[int, mx.array] = {}  # row -> its sampled token (1,)
    listed: dict[int, tuple[np.ndarray, mx.array]] = {}  # row -> (allowed ids, argmax among them)
    host_listed: dict[int, np.ndarray] = {}  # row -> allowed ids, their argmax taken by numpy
    asked: list[int] = []
    dists: list[mx.array] = []
    for i, r in enumerate(rows):
        if i in failed:
            continue
        try:
            if i in argmax_only:
                ids = r.mask_tokens
                if ids is not None:
                    ids = ids[ids < vocab] if ids.size and ids[-1] >= vocab else ids
                    if ids.size and on_host:
                        host_listed[i] = ids
                        continue
                    if ids.size:
                        among = mx.take(r.logits[0], mx.array(ids.astype(np.int32)))
                        listed[i] = (ids, mx.argmax(among, axis=-1))
                        continue
                if on_host:
                    host.append(i)  # kept if its mask allows it (checked below)
                    continue
                picks[i] = r.sampler(r.logits)  # kept if its mask allows it (checked below)
                continue
            if on_host and i not in masked and _argmax_only(r, row_failed, i):
                host.append(i)
                continue
            if i in failed:  # its processors' own check failed
                continue
            row_logits = views[i] if i in views else r.logits[0:1]  # (processors write in place)
            for proc in r.processors:
                row_logits = proc(r.tokens, row_logits)
            if r.request.logprobs is None:
                picks[i] = r.sampler(row_logits)
                continue
            dist = r.sampler.distribution(row_logits)  # what the draw samples from
            pick = r.sampler.draw(dist)
        except Exception as exc:
            row_failed(i, exc)
            continue
        picks[i] = pick
        asked.append(i)
        dists.append(dist)
    stats: list[RowStats | None] = [None] * len(rows)
    tokens = [-1] * len(rows)
    order = [i for i in range(len(rows)) if i in picks]
    if not order and not listed and not host and not host_listed:
        return tokens, stats
    tokens_arr = mx.concatenate([picks[i] for i in order]) if order else None
    among = [k for _, k in listed.values()]
    # Evaluated in the same sync (each batch's logits once), read in place below.
    among += sources(rows, [*host, *host_listed])
    if asked:
        assert tokens_arr is not None
        wants = [rows[i].request.logprobs or 0 for i in asked]
        at = {row: k for k, row in enumerate(order)}
        arrays = logprob_arrays(dists, tokens_arr[mx.array([at[i] for i in asked])], max(wants))
        extra = [pressures] if pressures is not None else []
        mx.eval(tokens_arr, *among, *arrays, *extra)  # one sync for tokens and logprobs
        for i, s in zip(asked, read_stats(arrays, wants), strict=True):
            if _wants_details(rows[i]):
                s.pressure = 0.0  # not masked this step: the grammar removed nothing
            stats[i] = s
        if pressures is not None:
            for i, p in zip(pressured, read_pressures(pressures), strict=True):
                if stats[i] is not None:
                    stats[i].pressure = p
    else:
        mx.eval(*([tokens_arr] if tokens_arr is not None else []), *among)
    if tokens_arr is not None:
        for i, t in zip(order, tokens_arr.tolist(), strict=True):
            tokens[i] = int(t)
    for i, (ids, k) in listed.items():
        tokens[i] = int(ids[int(k.item())])
    for i, t in whole_argmaxes(rows, host).items():
        tokens[i] = t
    for i, ids in host_listed.items():
        tokens[i] = listed_argmax(rows[i], ids)
    _redo_banned(rows, [i for i in (*order, *host) if i in argmax_only], tokens, row_failed)
    now = time.perf_counter()
    for r in rows:
        if r.timings.first_token_s is None:
            r.timings.first_token_s = now - r.started
    return tokens, stats


def _wants_details(row: SequenceState) -> bool:
    """Whether the row's request asked for token details (stand-in requests of tests: no)."""
    return bool(getattr(row.request, "token_details", False))


def _host_argmax(logits: mx.array) -> bool:
    """Whether whole-row argmaxes go to numpy: float32 logits on the CPU device (numpy reads
    them in place; it has no bfloat16, and a GPU's argmax is its own)."""
    return logits.dtype == mx.float32 and mx.default_device() == mx.cpu


def _argmax_only(row: SequenceState, row_failed: Callable[[int, Exception], None], i: int) -> bool:
    """True when ``row``'s token is the argmax of its masked logits: a greedy sampler, no
    logprobs, and no processor that would change the logits this step."""
    if not getattr(row.sampler, "greedy", False) or row.request.logprobs is not None:
        return False
    try:
        return processors_idle(row.processors, row.tokens)
    except Exception as exc:  # a processor's own check: this row's failure
        row_failed(i, exc)
        return False


def _masked_logits(rows: Sequence[SequenceState], which: list[int], bitmask: np.ndarray | None,
                   words: int, row_failed: Callable[[int, Exception], None]) -> dict[int, mx.array]:
    """The masked (1, V) logits of rows ``which``, their masks applied in one op."""
    if not which:
        return {}
    together = _filled_together(rows, bitmask, words)
    if together is not None:
        mask = together if len(which) == len(rows) else together[which]
    else:
        mask = np.full((len(which), words), -1, dtype=np.int32)
        for k, i in enumerate(which):
            try:
                row = rows[i].mask[0][:words]
                mask[k] = 0  # tokens past a row's mask (a padded model vocabulary): disallowed
                mask[k, :row.shape[0]] = row
            except Exception as exc:
                mask[k] = -1
                row_failed(i, exc)
    stacked = rows[which[0]].logits if len(which) == 1 else mx.concatenate([rows[i].logits for i in which])
    applied = apply_bitmask(stacked, mask)
    return {i: applied[k:k + 1] for k, i in enumerate(which)}


def _redo_banned(rows: Sequence[SequenceState], which: list[int], tokens: list[int],
                 row_failed: Callable[[int, Exception], None]) -> None:
    """Rows ``which`` took the argmax of all their logits: where their mask bans it, take the
    argmax of the masked logits instead (one more synchronisation, for those rows only)."""
    redo: dict[int, mx.array] = {}
    for i in which:
        r = rows[i]
        try:
            if not allows_token(r.mask[0], tokens[i]):
                redo[i] = r.sampler(apply_bitmask(r.logits, r.mask))
        except Exception as exc:
            tokens[i] = -1
            row_failed(i, exc)
    if redo:
        mx.eval(*redo.values())
        for i, t in redo.items():
            tokens[i] = int(t.item())
