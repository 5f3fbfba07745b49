"""The next-token masks of a batch's rows, filled on the CPU while the forward pass runs.

Both the decode step (after launching a batch's pass) and prefill (after launching a prompt's
last chunk, or several prompts' pass) fill masks, so the rule lives here once: the grammar's
allowed tokens, end-of-turn ids exactly when the grammar accepts, and near ``max_tokens`` the
shortest completion instead.

The rows of one call share one bitmask (a row each).  Rows whose matcher offers a
:class:`~afm_struct.grammar.engines.protocol.BatchFill` are filled together in one engine call
(llguidance: its thread pool, without the GIL); the others (a thinking gate before the answer,
another engine, a test's wrapper) one by one.  Each row's own part, its engine's failure
included, stays its own: a row that fails goes to ``on_error`` and the others are filled
exactly as they would be alone.

The engine calls of a large group (16 rows or more) run on a helper thread, in two chunks of
rows, one right after the other; the calling thread counts and lists each chunk's allowed
tokens and does each row's own part (EOS, budget rule, flags) as the chunk is written, while
the engine fills the next one.  Done after one call for the whole group, that part (~10 µs a
row at 128k tokens) bounded what the engine's parallel fill could gain; counted on the helper
between its engine calls, it kept the engine idle meanwhile (~100 µs a chunk of 16 rows).

Each row's time (its own part and its share of the shared call it was in) is charged to its
request's grammar budget (:mod:`.grammar_budget`); a row over it ends (``on_error``), and a row
whose masks are dear is kept out of the cheap rows' shared call.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..grammar.engines.protocol import BatchFill, allocate_bitmask, mask_words, matcher_failure
from .grammar_budget import SLOW_SHARED_S
from .masking import allowed_count, allowed_tokens, allows_token, bitmask_allows_all, set_tokens
from .sequence import SequenceState

# A mask allowing at most this many tokens also lists them (``seq.mask_tokens``), so that a
# greedy row samples from those logits alone (step_sampling.py).  Listed here, on the CPU while
# the forward pass runs, not after it.
LIST_ALLOWED_MAX = 4096
# Masks of at most this many tokens are checked for special tokens the parser rejects: the
# engine names one only where it forced text, in a one-token mask (grammar/engines/special_text.py);
# a wider mask naming special tokens is a grammar referring to them (a tool format's markup).
RESPELL_MAX = 8


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
        own = [0.0] * len(rows)  # each row's own part (its share of the shared calls added below)

        # The closer's searches in each row's part: not grammar work (length_close.py).
        closing = [0.0] * len(rows)

        def finish(i: int, filled: bool, counted: Counted | None = None) -> None:
            closer = rows[i].closer
            searched = closer.search_wall_s if closer is not None else 0.0
            t1 = time.perf_counter()
            try:
                self._finish_row(rows[i], bitmask[i], filled=filled, counted=counted)
            except Exception as exc:  # this row's grammar: it alone ends
                on_error(rows[i], exc)
            took = time.perf_counter() - t1
            closing[i] = closer.search_wall_s - searched if closer is not None else 0.0
            own[i] = took - closing[i]

        groups = self._groups(rows) if self.together else []
        # The largest group that fills straight into the bitmask, if it makes two chunks, runs
        # on the helper thread; the calling thread meanwhile fills the other groups and rows.
        width = bitmask.shape[1]
        chunked = max((g for g in groups if g[1] == width and len(g[2]) >= 2 * self.chunk_rows),
                      key=lambda g: len(g[2]), default=None)
        done: queue.SimpleQueue[tuple[list[int], bool]] = queue.SimpleQueue()
        pending = 0
        if chunked is not None:
            fill_fn, _, members = chunked
            size = max(self.chunk_rows, -(-len(members) // self.chunks))
            chunks = [members[k:k + size] for k in range(0, len(members), size)]
            try:
                _CHUNKS.submit(_fill_chunks, fill_fn, chunks, bitmask, done)
                pending = len(chunks)
            except RuntimeError:  # the interpreter shutting down: one call, on this thread
                chunked = None
        # After the helper's start: its engine call need not wait for these.
        for i, seq in enumerate(rows):
            seq.mask = bitmask[i:i + 1]
            seq.mask_tokens = None  # until its row is final (a row that fails keeps none)
        together: set[int] = set()
        call = [0.0] * len(rows)  # a row's share of the shared engine call it was in
        slow: set[int] = set()  # the rows of a slow shared call (grammar_budget.py)
        try:
            for group in groups:
                if group is not chunked:
                    t1 = time.perf_counter()
                    filled = self._fill_group(*group, bitmask)
                    took = time.perf_counter() - t1
                    together.update(filled)
                    for i in filled:
                        call[i] = took / len(filled)
                    if took > SLOW_SHARED_S:
                        slow.update(filled)
            waiting = {i for _, i in chunked[2]} if chunked is not None else set()
            for i in range(len(rows)):
                if i not in waiting:
                    finish(i, i in together)
            while pending:
                index, filled = done.get()
                pending -= 1
                counts: list[Counted] | None = None
                if filled:
                    together.update(index)
                    try:
                        counts = count_rows(bitmask, index, LIST_ALLOWED_MAX + len(self.eos_ids))
                    except Exception:  # (never seen) each row counts its own in _finish_row
                        pass
                for k, i in enumerate(index):
                    finish(i, filled, counts[k] if counts is not None else None)
        finally:
            # Never return (or raise) while the helper may still write into the bitmask: the
            # caller reuses it.
            while pending:
                done.get()
                pending -= 1
        elapsed = time.perf_counter() - t0 - sum(closing)
        # Each shared call made here is shared equally by its rows; the rest of the time not
        # spent in a row's own part (the helper's chunks, the waits) by the rows of the helper's
        # group (by all rows when no row was filled in a shared call).
        helped = {i for _, i in chunked[2]} & together if chunked is not None else set()
        sharing = helped or (set() if together else set(range(len(rows))))
        rest_s = max(elapsed - sum(own) - sum(call), 0.0)
        rest = rest_s / len(sharing) if sharing else 0.0
        if helped and rest_s > SLOW_SHARED_S:
            slow.update(helped)
        for i, seq in enumerate(rows):
            spent = own[i] + call[i] + (rest if i in sharing else 0.0)
            seq.timings.mask_s += spent
            # Where its next mask is filled (grammar_budget.py): the rows of a slow shared call
            # are timed alone once, to find a dear one among them; dear rows apart.
            seq.grammar.placed(in_call=i in together, slow_call=i in slow, own_s=own[i])
            if seq.done:
                continue
            try:
                seq.grammar.charge(spent, len(seq.tokens))
            except Exception as exc:  # over its budget: this row alone ends
                on_error(seq, exc)
        return reuse

    @staticmethod
    def _groups(rows: list[SequenceState]) -> list[tuple[Callable[..., None], int, list[tuple[Any, int]]]]:
        """The rows that offer a batch fill, by engine: ``(fill, words, [(handle, row)])``, for
        the groups of at least two rows (one row: the engine's thread pool would only add a
        hand-off)."""
        groups: dict[tuple[Any, int, bool], list[tuple[Any, int]]] = {}
        for i, seq in enumerate(rows):
            if seq.grammar.alone:  # timed on its own (grammar_budget.py)
                continue
            offer = getattr(seq.matcher, "batch_fill", None)
            try:
                fill: BatchFill | None = offer() if offer is not None else None
            except Exception:
                continue  # filled on its own: a failure of its engine shows there, for it alone
            if fill is not None:  # dear rows share a call of their own (grammar_budget.py)
                groups.setdefault((fill.fill, fill.words, seq.grammar.dear), []).append((fill.handle, i))
        return [(fill_fn, words, members) for (fill_fn, words, _), members in groups.items()
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
        ``row`` and, when few, their tokens (for the chunk together, not here again)."""
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
        # An EOS id the engine allows where its grammar does not accept is special-token text
        # it tokenized as the special token (grammar/engines/special_text.py): respelled below.
        stray = [] if accepting else [t for t in self.eos_ids if allows_token(row, t)]
        changed: list[int] = []
        if counted is not None:  # corrected for the EOS bits set or cleared below
            changed = [t for t in self.eos_ids if t >> 5 < row.shape[0] and allows_token(row, t) != accepting]
        set_tokens(row, self.eos_ids, accepting)
        if seq.closer is not None:
            # Near max_tokens: the shortest completion takes over (decoding/length_close.py).
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
        if allowed <= LIST_ALLOWED_MAX:
            seq.mask_tokens = allowed_tokens(row) if tokens is None else tokens
            if (stray or allowed <= RESPELL_MAX) and self._respell(matcher, row, seq.mask_tokens, stray):
                allowed = allowed_count(row)
                seq.mask_tokens = allowed_tokens(row)
            if allowed == 0:
                # Nothing can follow (an empty language, an unsatisfiable range, text the
                # tokenizer cannot spell): a sampled token would be one the grammar rejects.
                raise matcher_failure(matcher, "the grammar allows no next token", dead_end=True)
        if not seq.request.stops_cut_grammar:
            # Free text (more than half the vocabulary), as opposed to a structure.
            seq.mask_free = seq.mask_all or allowed * 2 > self.vocab_size

    def _respell(self, matcher: Any, row: np.ndarray, listed: np.ndarray, stray: list[int]) -> bool:
        """Replace in ``row`` the special tokens the engine allows but its parser rejects
        (``stray`` EOS ids, special ids among the ``listed`` tokens) by their plain spellings
        (grammar/engines/special_text.py); True if the row changed."""
        respell = getattr(matcher, "respell", None)
        if respell is None:
            return False
        # An EOS id among the listed ones was set by the EOS policy above (the grammar accepts):
        # it ends the turn, whatever the engine's parser says of it (llguidance takes only its
        # own EOS id, not the other end-of-turn ids).
        fixes = [*respell([t for t in listed.tolist() if t not in self.eos_ids]),
                 *(respell(stray) if stray else ())]
        if not fixes:
            return False
        set_tokens(row, [t for t, _ in fixes], False)
        set_tokens(row, [p for _, p in fixes if p is not None], True)
        return True


def _fill_chunks(fill_fn: Callable[..., None], chunks: list[list[tuple[Any, int]]], bitmask: np.ndarray,
                 done: queue.SimpleQueue[tuple[list[int], bool]]) -> None:
    """The helper thread's part: one engine call per chunk, back to back, each reported on
    ``done`` as soon as it is written, as ``(rows, True)``; ``(rows, False)`` for a call that
    refused (its rows are filled, and fail, on their own).  Nothing else runs here: the engine
    is idle between two calls."""
    for chunk in chunks:
        index = [i for _, i in chunk]
        try:
            fill_fn(chunk, bitmask)
        except Exception:
            done.put((index, False))
            continue
        done.put((index, True))


# A row's allowed-token count, and its tokens (ascending, int64) when at most the listing bound.
Counted = tuple[int, "np.ndarray | None"]


def count_rows(bitmask: np.ndarray, index: list[int], list_max: int) -> list[Counted]:
    """For rows ``index`` of ``bitmask``: how many tokens each allows, and the tokens of those
    allowing at most ``list_max`` (one numpy pass for the rows together)."""
    # The rows of a group are usually consecutive: a view, not a copy.
    consecutive = index == list(range(index[0], index[0] + len(index)))
    rows = bitmask[index[0]:index[0] + len(index)] if consecutive else bitmask[index]
    # 64-bit words where the rows allow it: half the elements, ~2x faster.
    even = rows.shape[1] % 2 == 0 and rows.flags.c_contiguous
    wide = rows.view(np.uint64) if even else rows.view(np.uint32)
    counts = np.bitwise_count(wide).sum(axis=1).tolist()
    small = [k for k, c in enumerate(counts) if c <= list_max]
    listed: dict[int, np.ndarray] = {}
    if small:
        sub = rows[small] if len(small) < len(index) else rows
        width = sub.shape[1]
        # Row-major: each row's words ascending.  On a boolean array: numpy's nonzero on int32
        # words took ~7x as long (60 µs for 12 rows of 128k tokens, most of the counting).
        flat = np.flatnonzero(sub != 0)
        owner, word = np.divmod(flat, width)
        bits = np.unpackbits(sub.reshape(-1)[flat].view(np.uint8), bitorder="little")
        # The set bits of the unpacked words, as one flat pass over a boolean view (a 2-D
        # nonzero over the (words, 32) array cost ~4x).
        at = np.flatnonzero(bits.view(bool))
        hit, bit = at >> 5, at & 31
        tokens = word[hit] * 32 + bit
        cuts = np.searchsorted(owner[hit], np.arange(len(small) + 1)).tolist()
        listed = {k: tokens[cuts[j]:cuts[j + 1]] for j, k in enumerate(small)}
    return [(c, listed.get(k)) for k, c in enumerate(counts)]
