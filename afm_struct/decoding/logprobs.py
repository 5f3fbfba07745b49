"""Token log-probabilities for the rows that ask for them: device math, token text, alignment.

What a logprob means here: the log-softmax of the logits the sampler actually draws from —
after the grammar mask, the logits processors (repetition penalty, loop breaker), temperature
and the top-k / top-p / min-p filters (:meth:`RowSampler.distribution`).  Tokens the mask or a
filter removed have probability 0 and never appear among the alternatives.  Greedy decoding
(temperature 0) has no sampling distribution; it reports the masked and penalized logits at
temperature 1 without filters, i.e. the model's own (constrained) belief.

Tokens the engine decided without sampling — a grammar's forced run (fast-forward) and the
budget's closing tokens — get logprob 0.0 and themselves as the only alternative: the mask
allowed nothing else, so under the masked distribution their probability is 1.

Cost: requests that did not ask pay nothing (no extra array, no extra sync).  For the rows that
asked, one batched log-softmax, gather and ``argpartition`` run on the device and are read in
the same synchronisation as the sampled tokens.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

import mlx.core as mx

from ..models.byte_level import byte_decoder
from ..turn.outputs import TokenLogprob, TopLogprob

if TYPE_CHECKING:
    from ..models.tokenizer import Tokenizer

MAX_TOP_LOGPROBS = 20
# JSON has no -inf; OpenAI reports "practically impossible" as -9999.0 too.
FLOOR = -9999.0


# -- token text ------------------------------------------------------------------------------


_BYTE_DECODER = byte_decoder()
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


class TokenTable:
    """Token id → (display text, UTF-8 bytes), computed on first use and cached.

    A token that is not whole UTF-8 (part of a multi-byte character) is shown as
    ``bytes:\\xe2\\x80`` (OpenAI's convention); ``bytes`` is always the exact byte string.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.lookup = lru_cache(maxsize=65536)(self._compute)

    def _compute(self, token_id: int) -> tuple[str, tuple[int, ...]]:
        text = self.tokenizer.decode([token_id])
        if "\ufffd" not in text:
            return text, tuple(text.encode())
        raw = self._raw_bytes(token_id)
        if raw is None:
            return text, tuple(text.encode())
        try:
            return raw.decode("utf-8"), tuple(raw)
        except UnicodeDecodeError:
            return "bytes:" + "".join(f"\\x{b:02x}" for b in raw), tuple(raw)

    def _raw_bytes(self, token_id: int) -> bytes | None:
        hf = getattr(self.tokenizer, "hf", None)
        if hf is None:
            return None
        piece = hf.convert_ids_to_tokens(token_id)
        if not isinstance(piece, str):
            return None
        if (m := _BYTE_PIECE.fullmatch(piece)) is not None:  # sentencepiece byte fallback
            return bytes([int(m.group(1), 16)])
        if all(ch in _BYTE_DECODER for ch in piece):  # byte-level BPE
            return bytes(_BYTE_DECODER[ch] for ch in piece)
        return None


def token_table(tokenizer: Tokenizer) -> TokenTable:
    """The (shared) :class:`TokenTable` of ``tokenizer``, kept in its derived parts."""
    return tokenizer.derived.part("token_table", "token_table", lambda: TokenTable(tokenizer))


# -- device math -----------------------------------------------------------------------------


@dataclass
class RowStats:
    """What one sampled row's distribution says: the chosen token's logprob, the top-n."""

    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)
    # The mass the grammar mask removed (decoding/constraint_pressure.py), when asked for.
    pressure: float | None = None


def row_logsumexp(logits: mx.array) -> mx.array:
    """``(R, 1)`` log-sum-exp of each row.  On the CPU MLX's ``exp`` runs one float at a time
    (a vocabulary row: ~0.8 ms); the fused polynomial of :mod:`afm_struct.models.cpu_exp`
    is several times faster at float32 precision (removed tokens, -inf, count as ~1e-38)."""
    from ..models import cpu_exp

    if not cpu_exp.wanted():
        return mx.logsumexp(logits, axis=-1, keepdims=True)
    top = mx.max(logits, axis=-1, keepdims=True)
    return top + mx.log(mx.sum(cpu_exp.exp(logits - top), axis=-1, keepdims=True))


def logprob_arrays(dists: Sequence[mx.array], tokens: mx.array, n: int) -> list[mx.array]:
    """Lazy arrays for the rows that asked: ``[chosen (R,), top ids (R, n), top values (R, n)]``.

    ``dists`` are the rows' processed logits ``(1, V)``, ``tokens`` the ``(R,)`` tokens drawn
    from them; ``n`` the most alternatives any of these rows wants (0: none).  Only the
    gathered entries are normalized (logit - log-sum-exp); the full log-softmax row is never
    built, and the top-n is selected on the logits (same order).
    """
    logits = dists[0] if len(dists) == 1 else mx.concatenate(list(dists), axis=0)
    lse = row_logsumexp(logits)
    chosen = (mx.take_along_axis(logits, tokens.reshape(-1, 1).astype(mx.int32), axis=-1) - lse)[:, 0]
    if n <= 0:
        return [chosen]
    vocab = logits.shape[-1]
    n = min(n, vocab)
    ids = mx.argpartition(logits, kth=vocab - n, axis=-1)[:, vocab - n:]
    return [chosen, ids, mx.take_along_axis(logits, ids, axis=-1) - lse]


def read_stats(arrays: list[mx.array], wants: Sequence[int]) -> list[RowStats]:
    """Evaluated :func:`logprob_arrays` → per-row stats, alternatives sorted, removed ones out."""
    chosen = arrays[0].tolist()
    ids = arrays[1].tolist() if len(arrays) > 1 else None
    vals = arrays[2].tolist() if len(arrays) > 1 else None
    out = []
    for r, want in enumerate(wants):
        top: list[tuple[int, float]] = []
        if want > 0 and ids is not None and vals is not None:
            pairs = [(int(i), float(v)) for i, v in zip(ids[r], vals[r], strict=True) if v != -math.inf]
            top = sorted(pairs, key=lambda p: (-p[1], p[0]))[:want]
        out.append(RowStats(_finite(chosen[r]), top))
    return out


def _finite(value: float) -> float:
    return FLOOR if not math.isfinite(value) else max(float(value), FLOOR)


# -- entries and alignment with the emitted text ---------------------------------------------


def make_entries(run: Sequence[int], sampled: int, stats: RowStats | None, want: int,
                 table: TokenTable) -> list[TokenLogprob]:
    """Entries for one step's run: the sampled token (if the run starts with it) and forced ones."""
    out = []
    for i, token in enumerate(run):
        text, raw = table.lookup(token)
        if i == 0 and token == sampled and stats is not None:
            top = tuple(_alternative(table, t, lp) for t, lp in stats.top)
            out.append(TokenLogprob(text, token, stats.logprob, raw, top, pressure=stats.pressure))
        else:  # forced or closing: the only token allowed, probability 1
            top = (TopLogprob(text, token, 0.0, raw),) if want > 0 else ()
            out.append(TokenLogprob(text, token, 0.0, raw, top, sampled=False))
    return out


def _alternative(table: TokenTable, token: int, logprob: float) -> TopLogprob:
    text, raw = table.lookup(token)
    return TopLogprob(text, token, logprob, raw)


class TokenTrack:
    """Pairs decided tokens with the text the generator emits, so each token's entry travels
    with the :class:`TextDelta` that shows the token's last visible character.

    The emitted text is always a prefix of the detokenized text (stop strings only hold back
    or cut the tail), so character counts are enough.  A token whose detokenized piece is
    empty (the first bytes of a multi-byte character) goes with the token that completes the
    character; tokens with no visible character (a stop string's, a partial character never
    completed) are never reported.
    """

    def __init__(self, want: int, table: TokenTable) -> None:
        self.want = want
        self.table = table
        self._queued: list[TokenLogprob] = []  # decided, text not yet known
        self._spans: list[tuple[TokenLogprob, int, int]] = []  # text known: (entry, start, end)
        self._raw = 0  # characters of detokenized text so far
        self._shown = 0  # characters emitted so far

    def decided(self, run: Sequence[int], sampled: int, stats: RowStats | None) -> None:
        """Queue the entries of one step's run (in the order the detokenizer will see them)."""
        self._queued.extend(make_entries(run, sampled, stats, self.want, self.table))

    def text(self, piece: str) -> None:
        """The detokenizer's output for the next queued token."""
        entry = self._queued.pop(0)
        start = self._raw
        self._raw += len(piece)
        if piece:  # the empty pieces before it share this token's span
            for i in range(len(self._spans) - 1, -1, -1):
                e, s, t = self._spans[i]
                if t != start or s != start:
                    break
                self._spans[i] = (e, start, self._raw)
        self._spans.append((entry, start, self._raw))

    def tail(self, piece: str) -> None:
        """Text the detokenizer released at the end: it belongs to the trailing empty pieces."""
        if not piece:
            return
        start = self._raw
        self._raw += len(piece)
        for i in range(len(self._spans) - 1, -1, -1):
            e, s, t = self._spans[i]
            if s != start or t != start:
                break
            self._spans[i] = (e, start, self._raw)

    def emitted(self, n_chars: int, *, final: bool) -> list[TokenLogprob]:
        """Entries whose text is now shown (``final``: nothing more will be; partly shown
        tokens go now, unshown ones are dropped)."""
        self._shown += n_chars
        out: list[TokenLogprob] = []
        while self._spans:
            entry, start, end = self._spans[0]
            shown = end <= self._shown and end > start
            partly = final and start < self._shown
            if not (shown or partly):
                break
            self._spans.pop(0)
            out.append(_with_span(entry, start, end))
        if final:
            self._spans.clear()
        return out


def _with_span(entry: TokenLogprob, start: int, end: int) -> TokenLogprob:
    return TokenLogprob(entry.token, entry.id, entry.logprob, entry.bytes, entry.top, start, end,
                        entry.sampled, entry.pressure)
