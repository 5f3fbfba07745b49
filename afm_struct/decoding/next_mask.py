"""The next-token masks of a batch's rows, filled on the CPU while the forward pass runs.

Both the decode step (after launching a batch's pass) and prefill (after launching a prompt's
last chunk, or several prompts' pass) fill masks, so the rule lives here once: the grammar's
allowed tokens, end-of-turn ids exactly when the grammar accepts, and near ``max_tokens`` the
shortest completion instead.

The rows of one call share one bitmask (a row each).  Rows whose matcher offers a
:class:`~afm_struct.grammar.engine.BatchFill` are filled together in one engine call
(llguidance: its thread pool, without the GIL); the others (a thinking gate before the answer,
another engine, a test's wrapper) one by one.  Each row's own part, its engine's failure
included, stays its own: a row that fails goes to ``on_error`` and the others are filled
exactly as they would be alone.

The engine calls of a large group (16 rows or more) run on a helper thread, in two chunks of
rows; the helper also counts and lists each chunk's allowed tokens (numpy, without the GIL),
and the calling thread does each row's own part (EOS, budget rule, flags) as its chunk is
written, while the engine fills the next one.  Done after one call for the whole group, that
part (~25 µs a row at 128k tokens, mostly the counting and listing) bounded what the
engine's parallel fill could gain.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..grammar.engine import BatchFill, allocate_bitmask, mask_words, matcher_failure
from .masking import allowed_count, allowed_tokens, allows_token, bitmask_allows_all, set_tokens
from .sequence import SequenceState

# A mask allowing at most this many tokens also lists them (``seq.mask_tokens``), so that a
# greedy row samples from those logits alone (step_sampling.py).  Listed here, on the CPU while
# the forward pass runs, not after it.
LIST_ALLOWED_MAX = 4096


# A group's fill is split when each chunk gets at least CHUNK_ROWS rows, into CHUNKS engine
# calls: each call wakes the engine's threads (and leaves them spinning a while), which
# measured ~5 µs a row of CPU per extra call at 32 rows of 128k tokens; two calls are the
# least that overlaps the rows' own part with the engine.
CHUNK_ROWS = 8
CHUNKS = 2
# The thread that makes the chunked engine calls (they release the GIL: the calling thread's
# Python runs meanwhile).  One per process, started on first use; a few, so that two
# generators filling at once do not wait for each other.
_CHUNKS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="afm-masks")


def _raise(_seq: SequenceState, exc: Exception) -> None:
    raise exc


class MaskFiller:
    """Fills ``seq.mask`` (a 1-row view of the call's bitmask) for each row's next sampled token."""

    def __init__(self, vocab_size: int, eos_ids: Iterable[int]) -> None:
        self.vocab_size = vocab_size
        self.eos_ids = frozenset(eos_ids)
        # Off: every row on its own (the row-by-row baseline of ``bench step``).
        self.together = True
        # How a large group's fill is split (CHUNK_ROWS, CHUNKS).
        self.chunk_rows = CHUNK_ROWS
        self.chunks = CHUNKS

    def __call__(self, seq: SequenceState) -> None:
        """Compute the next-token mask of ``seq`` (nothing for an unconstrained sequence);
        its failure is raised."""
        self.fill_rows([seq], _raise)

    def fill_rows(self, seqs: Sequence[SequenceState], on_error: Callable[[SequenceState, Exception], None],
                  reuse: np.ndarray | None = None) -> np.ndarray | None:
        """Compute the next-token masks of ``seqs`` (one bitmask, a row per constrained
        sequence); a row whose part fails goes to ``on_error(seq, exc)``, the others go on.

        Returns the bitmask, which the caller may pass back as ``reuse`` once the masks it
        holds are spent (a batch group's, step after step): a fresh (rows, words) array costs
        page faults, ~1 ms a step for 32 rows of a 128k vocabulary.
        """
        rows = [s for s in seqs if s.matcher is not None]
        if not rows:
            return reuse
        t0 = time.perf_counter()
        words = mask_words(self.vocab_size)
        if reuse is None or reuse.shape[0] < len(rows) or reuse.shape[1] != words:
            reuse = allocate_bitmask(max(len(rows), 2 * (reuse.shape[0] if reuse is not None else 0)),
                                     self.vocab_size)
        bitmask = reuse[:len(rows)]
        for i, seq in enumerate(rows):
            seq.mask = bitmask[i:i + 1]
            seq.mask_tokens = None  # until its row is final (a row that fails keeps none)
        own = [0.0] * len(rows)  # each row's own part (its share of the shared calls added below)

        def finish(i: int, filled: bool, counted: Counted | None = None) -> None:
            t1 = time.perf_counter()
            try:
                self._finish_row(rows[i], bitmask[i], filled=filled, counted=counted)
            except Exception as exc:  # this row's grammar: it alone ends
                on_error(rows[i], exc)
            own[i] = time.perf_counter() - t1

        groups = self._groups(rows) if self.together else []
        # The largest group that fills straight into the bitmask, if it makes two chunks, runs
        # on the helper thread; the calling thread meanwhile fills the other groups and rows.
        width = bitmask.shape[1]
        chunked = max((g for g in groups if g[1] == width and len(g[2]) >= 2 * self.chunk_rows),
                      key=lambda g: len(g[2]), default=None)
        done: queue.SimpleQueue[tuple[list[int], bool, list[Counted] | None]] = queue.SimpleQueue()
        pending = 0
        if chunked is not None:
            fill_fn, _, members = chunked
            size = max(self.chunk_rows, -(-len(members) // self.chunks))
            chunks = [members[k:k + size] for k in range(0, len(members), size)]
            try:
                _CHUNKS.submit(_fill_chunks, fill_fn, chunks, bitmask, len(self.eos_ids), done)
                pending = len(chunks)
            except RuntimeError:  # the interpreter shutting down: one call, on this thread
                chunked = None
        together: set[int] = set()
        try:
            for group in groups:
                if group is not chunked:
                    together.update(self._fill_group(*group, bitmask))
            waiting = {i for _, i in chunked[2]} if chunked is not None else set()
            for i in range(len(rows)):
                if i not in waiting:
                    finish(i, i in together)
            while pending:
                index, filled, counts = done.get()
                pending -= 1
                if filled:
                    together.update(index)
                for k, i in enumerate(index):
                    finish(i, filled, counts[k] if counts is not None else None)
        finally:
            # Never return (or raise) while the helper may still write into the bitmask: the
            # caller reuses it.
            while pending:
                done.get()
                pending -= 1
        elapsed = time.perf_counter() - t0
        # The time not spent in a row's own part (the shared calls, the waits) is shared
        # equally by the rows filled together (by all rows when none was).
        sharing = together or set(range(len(rows)))
        shared = max(elapsed - sum(own), 0.0) / len(sharing)
        for i, seq in enumerate(rows):
            seq.timings.mask_s += own[i] + (shared if i in sharing else 0.0)
        return reuse

    @staticmethod
    def _groups(rows: list[SequenceState]) -> list[tuple[Callable[..., None], int, list[tuple[Any, int]]]]:
        """The rows that offer a batch fill, by engine: ``(fill, words, [(handle, row)])``, for
        the groups of at least two rows (one row: the engine's thread pool would only add a
        hand-off)."""
        groups: dict[tuple[Any, int], list[tuple[Any, int]]] = {}
        for i, seq in enumerate(rows):
            offer = getattr(seq.matcher, "batch_fill", None)
            try:
                fill: BatchFill | None = offer() if offer is not None else None
            except Exception:
                continue  # filled on its own: a failure of its engine shows there, for it alone
            if fill is not None:
                groups.setdefault((fill.fill, fill.words), []).append((fill.handle, i))
        return [(fill_fn, words, members) for (fill_fn, words), members in groups.items()
                if len(members) >= 2]

    @staticmethod
    def _fill_group(fill_fn: Callable[..., None], words: int, members: list[tuple[Any, int]],
                    bitmask: np.ndarray) -> list[int]:
        """One engine call for a group's rows; the indices it filled (none if it refused:
        each row is then filled, and fails, on its own)."""
        index = [i for _, i in members]
        width = bitmask.shape[1]
        try:
            if words == width:  # the usual case: straight into the batch's bitmask
                fill_fn(members, bitmask)
            else:  # a model vocabulary padded past the tokenizer's: a narrower scratch
                out = np.zeros((len(members), words), dtype=np.int32)
                fill_fn([(h, k) for k, (h, _) in enumerate(members)], out)
                span = min(words, width)
                bitmask[index, :span] = out[:, :span]
        except Exception:
            return []
        return index

    def _finish_row(self, seq: SequenceState, row: np.ndarray, *, filled: bool,
                    counted: Counted | None = None) -> None:
        """Fill ``row`` (unless the batch call did), check the engine, apply the EOS and
        budget rules, and note what the mask allows.  ``counted``: the bits the engine set in
        ``row`` and, when few, their tokens (by the helper thread, not here again)."""
        matcher = seq.matcher
        assert matcher is not None
        if not filled:
            row[:] = 0  # (a reused bitmask: the engine may write only part of the row)
            matcher.fill_mask(row)
        if matcher.error() is not None:
            # An engine that fails while computing a mask leaves a mask of nothing (or EOS
            # only) and reports itself finished: that would end the row as a silent "stop".
            raise matcher_failure(matcher, "the grammar failed to compute the next mask")
        # EOS policy lives here, not in each engine: any end-of-turn id iff the grammar accepts.
        accepting = matcher.is_accepting()
        changed: list[int] = []
        if counted is not None:  # corrected for the EOS bits set or cleared below
            changed = [t for t in self.eos_ids if t >> 5 < row.shape[0] and allows_token(row, t) != accepting]
        set_tokens(row, self.eos_ids, accepting)
        if seq.closer is not None:
            # Near max_tokens: the shortest completion takes over (decoding/closing.py).
            closing = seq.closer.before_sample(matcher, seq.tokens, seq.max_tokens, row)
            if closing:
                row[:] = 0
                set_tokens(row, closing[:1], True)
                counted = None
        seq.mask_all = bitmask_allows_all(row, self.vocab_size)
        tokens: np.ndarray | None = None
        if counted is None:
            allowed = allowed_count(row)
        else:
            allowed = counted[0] + (len(changed) if accepting else -len(changed))
            tokens = counted[1]  # listed when at most LIST_ALLOWED_MAX + the EOS ids
            if tokens is not None and allowed <= LIST_ALLOWED_MAX:
                if changed:
                    ids = np.asarray(changed, dtype=np.int64)
                    tokens = np.union1d(tokens, ids) if accepting else np.setdiff1d(tokens, ids)
        if not seq.request.stops_cut_grammar:
            # Free text (more than half the vocabulary), as opposed to a structure.
            seq.mask_free = seq.mask_all or allowed * 2 > self.vocab_size
        if allowed <= LIST_ALLOWED_MAX:
            seq.mask_tokens = allowed_tokens(row) if tokens is None else tokens


def _fill_chunks(fill_fn: Callable[..., None], chunks: list[list[tuple[Any, int]]], bitmask: np.ndarray,
                 eos: int, done: queue.SimpleQueue[tuple[list[int], bool, list[Counted] | None]]) -> None:
    """The helper thread's part: one engine call per chunk, in order, each reported on ``done``
    as soon as it is written, as ``(rows, True, what each row holds)``; ``(rows, False, None)``
    for a call that refused (its rows are filled, and fail, on their own).

    What a row holds (:func:`count_rows`) is counted here, numpy without the GIL, not on the
    calling thread: those passes over every word were most of the rows' own part, and the
    calling thread reads rows the engine's threads just wrote from other cores' caches."""
    for chunk in chunks:
        index = [i for _, i in chunk]
        try:
            fill_fn(chunk, bitmask)
        except Exception:
            done.put((index, False, None))
            continue
        counted: list[Counted] | None
        try:
            counted = count_rows(bitmask, index, LIST_ALLOWED_MAX + eos)
        except Exception:  # (never seen) counted on the calling thread instead
            counted = None
        done.put((index, True, counted))


# A row's allowed-token count, and its tokens (ascending, int64) when at most the listing bound.
Counted = tuple[int, "np.ndarray | None"]


def count_rows(bitmask: np.ndarray, index: list[int], list_max: int) -> list[Counted]:
    """For rows ``index`` of ``bitmask``: how many tokens each allows, and the tokens of those
    allowing at most ``list_max`` (one numpy pass for the rows together)."""
    # The rows of a group are usually consecutive: a view, not a copy.
    consecutive = index == list(range(index[0], index[0] + len(index)))
    rows = bitmask[index[0]:index[0] + len(index)] if consecutive else bitmask[index]
    counts = np.bitwise_count(rows.view(np.uint32)).sum(axis=1).tolist()
    small = [k for k, c in enumerate(counts) if c <= list_max]
    listed: dict[int, np.ndarray] = {}
    if small:
        sub = rows[small] if len(small) < len(index) else rows
        width = sub.shape[1]
        flat = np.flatnonzero(sub)  # row-major: each row's words ascending
        owner, word = np.divmod(flat, width)
        bits = np.unpackbits(sub.reshape(-1)[flat].view(np.uint8), bitorder="little").reshape(-1, 32)
        hit, bit = np.nonzero(bits)
        tokens = word[hit] * 32 + bit
        cuts = np.searchsorted(owner[hit], np.arange(len(small) + 1)).tolist()
        listed = {k: tokens[cuts[j]:cuts[j + 1]] for j, k in enumerate(small)}
    return [(c, listed.get(k)) for k, c in enumerate(counts)]
