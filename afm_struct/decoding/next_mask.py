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
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..grammar.engine import BatchFill, allocate_bitmask, mask_words, matcher_failure
from .masking import allowed_count, allowed_tokens, bitmask_allows_all, set_tokens
from .sequence import SequenceState

# A mask allowing at most this many tokens also lists them (``seq.mask_tokens``), so that a
# greedy row samples from those logits alone (step_sampling.py).  Listed here, on the CPU while
# the forward pass runs, not after it.
LIST_ALLOWED_MAX = 4096


def _raise(_seq: SequenceState, exc: Exception) -> None:
    raise exc


class MaskFiller:
    """Fills ``seq.mask`` (a 1-row view of the call's bitmask) for each row's next sampled token."""

    def __init__(self, vocab_size: int, eos_ids: Iterable[int]) -> None:
        self.vocab_size = vocab_size
        self.eos_ids = frozenset(eos_ids)
        # Off: every row on its own (the row-by-row baseline of ``bench step``).
        self.together = True

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
        together = self._fill_together(rows, bitmask) if self.together else set()
        shared = (time.perf_counter() - t0) / max(len(together), 1)
        for i, seq in enumerate(rows):
            t1 = time.perf_counter()
            try:
                self._finish_row(seq, bitmask[i], filled=i in together)
            except Exception as exc:  # this row's grammar: it alone ends
                on_error(seq, exc)
            seq.timings.mask_s += time.perf_counter() - t1 + (shared if i in together else 0.0)
        return reuse

    def _fill_together(self, rows: list[SequenceState], bitmask: np.ndarray) -> set[int]:
        """Fill the rows that offer a batch fill, one engine call per engine; return their
        indices (the others are filled one by one)."""
        groups: dict[tuple[Any, int], list[tuple[Any, int]]] = {}
        for i, seq in enumerate(rows):
            offer = getattr(seq.matcher, "batch_fill", None)
            try:
                fill: BatchFill | None = offer() if offer is not None else None
            except Exception:
                continue  # filled on its own: a failure of its engine shows there, for it alone
            if fill is not None:
                groups.setdefault((fill.fill, fill.words), []).append((fill.handle, i))
        done: set[int] = set()
        width = bitmask.shape[1]
        for (fill_fn, words), members in groups.items():
            if len(members) < 2:
                continue  # one row: the engine's thread pool would only add a hand-off
            index = [i for _, i in members]
            try:
                if words == width:  # the usual case: straight into the batch's bitmask
                    fill_fn(members, bitmask)
                else:  # a model vocabulary padded past the tokenizer's: a narrower scratch
                    out = np.zeros((len(members), words), dtype=np.int32)
                    fill_fn([(h, k) for k, (h, _) in enumerate(members)], out)
                    span = min(words, width)
                    bitmask[index, :span] = out[:, :span]
            except Exception:
                continue  # a shared call that refused: each row is filled (and fails) on its own
            done.update(index)
        return done

    def _finish_row(self, seq: SequenceState, row: np.ndarray, *, filled: bool) -> None:
        """Fill ``row`` (unless the batch call did), check the engine, apply the EOS and
        budget rules, and note what the mask allows."""
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
        set_tokens(row, self.eos_ids, matcher.is_accepting())
        if seq.closer is not None:
            # Near max_tokens: the shortest completion takes over (decoding/closing.py).
            closing = seq.closer.before_sample(matcher, seq.tokens, seq.max_tokens, row)
            if closing:
                row[:] = 0
                set_tokens(row, closing[:1], True)
        seq.mask_all = bitmask_allows_all(row, self.vocab_size)
        allowed = allowed_count(row)
        if not seq.request.stops_cut_grammar:
            # Free text (more than half the vocabulary), as opposed to a structure.
            seq.mask_free = seq.mask_all or allowed * 2 > self.vocab_size
        if allowed <= LIST_ALLOWED_MAX:
            seq.mask_tokens = allowed_tokens(row)
