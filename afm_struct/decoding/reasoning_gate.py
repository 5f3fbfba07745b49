"""The generator's side of the turn's state machine: masks, the reasoning budget, the turn's end.

:class:`ReasoningGate` reads the phase of the request's :class:`~afm_struct.turn.turn.Turn`,
the one object whose events the response is written from (the generator feeds it each token's
emitted text as soon as the token is taken: ``decoding/emit.py``), so the two cannot disagree
about where the model is; it moves on from what the turn read before each decision
(:meth:`ReasoningGate._sync`).  A gate without a shared turn (a gate used on its own, the
budget closer's forks, which try tokens ahead of the text) reads its own tokens' text into a
:class:`~afm_struct.turn.reasoning.TurnText`.  It is a
:class:`~afm_struct.grammar.engines.protocol.Matcher` itself, wrapping the request's matcher if it has
one, so the loop does not change.  It works in one of two modes:

* **gate** (a constraint, and a syntax whose block the mask may open: ``<think>``): no grammar
  mask inside the block; the constraint governs the answer.  States: ``start`` (the answer's
  grammar, plus the first token of the open tag), ``opening`` (the rest of the open tag is
  forced), ``thinking`` (everything allowed, EOS excluded, until the text closes the block),
  ``closing`` (the budget of thinking tokens is spent: the close tag is forced),
  ``answer_start`` (whitespace the template writes after the block) and ``answer`` (the wrapped
  matcher from its start state).
* **watch** (no constraint, or a syntax whose block the grammar itself writes or forbids:
  Harmony's analysis channel): the mask is the wrapped matcher's (everything without one); the
  gate counts the block's tokens and forces the text that leaves it once the budget is spent
  (state ``closing``), and ends the turn at the syntax's end text (``<|call|>``) when nothing
  else does.

Either way, when ``max_tokens`` cuts the block, the budget-aware closer first leaves the block
(:meth:`ReasoningGate.closing_prefix`) and then completes the answer from there.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import numpy as np

from ..grammar.closer.hints import NO_HINTS, ClosingHints
from ..grammar.engines.protocol import BatchFill, Matcher
from ..turn.reasoning import SYNTAXES, THINK, THINK_TAGS, ReasoningTags, TurnText, detect_reasoning
from ..turn.turn import Turn
from .masking import set_tokens

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..models.tokenizer import Tokenizer

__all__ = ["SYNTAXES", "THINK_TAGS", "ReasoningGate", "ReasoningTags", "detect_reasoning_tags"]


class ReasoningGate:
    """Wraps ``inner`` (or nothing) with the turn's reasoning rules; see the module docstring."""

    def __init__(self, inner: Matcher | None, tokenizer: Tokenizer, tags: ReasoningTags,
                 turn: Turn | None = None) -> None:
        self.inner = inner
        self.tokenizer = tokenizer
        self.tags = tags
        # The request's turn, which the generator feeds the text it emits (so the gate and the
        # answer's events read one object); without one (a gate on its own, a closer's fork)
        # the gate reads its own tokens' text.
        self.turn: Turn | TurnText = (turn if turn is not None
                                      else TurnText(tags, start_in_reasoning=tags.opened_in_prompt))
        self._reads = turn is None
        # Watch mode: was the last token inside the block (the phase before its text was read)?
        # Counted once its text is read: then the phase says whether it closed the block.
        self._unread: bool | None = None
        self.gating = tags.gated and inner is not None
        self.open_ids = tokenizer.encode(tags.open)
        self.state = "start" if self.gating else "watch"
        self._opening_at = 0
        self._spent = 0  # thinking tokens so far
        # What leaves the block: the close tag (gate), the syntax's leave text (watch).
        self._close_ids = tokenizer.encode(tags.close if self.gating else tags.leave_text)
        self._closing_at = 0
        if tags.opened_in_prompt:
            self._think()
        self._scratch: np.ndarray | None = None
        # Line breaks a model writes after the close tag, allowed before the answer starts.
        self._gap_ids = sorted({ids[0] for ids in (tokenizer.encode(t) for t in ("\n", "\n\n", " "))
                                if len(ids) == 1})

    def fill_mask(self, row: np.ndarray) -> None:
        """The inner mask, widened or replaced according to the state."""
        self._sync()
        if self.state == "thinking" or (self.inner is None and self.state != "closing"):
            row[:] = -1
            if self.gating:
                set_tokens(row, self.tokenizer.eos_token_ids, False)
        elif self.state == "closing":
            row[:] = 0
            set_tokens(row, [self._close_ids[self._closing_at]], True)
        elif self.state == "opening":
            row[:] = 0
            set_tokens(row, [self.open_ids[self._opening_at]], True)
        else:
            assert self.inner is not None
            self.inner.fill_mask(row)
            if self.state == "start":
                set_tokens(row, [self.open_ids[0]], True)
            elif self.state == "answer_start":
                set_tokens(row, self._gap_ids, True)

    def batch_fill(self) -> BatchFill | None:
        """The inner matcher's batch fill where its mask is used as is (answering, watching);
        None otherwise, and the row is filled on its own."""
        self._sync()
        inner = getattr(self.inner, "batch_fill", None)
        return inner() if self.state in ("answer", "watch") and inner is not None else None

    def _inner_allows(self, token: int) -> bool:
        assert self.inner is not None
        if self._scratch is None:
            self._scratch = np.zeros((self.tokenizer.vocab_size + 31) // 32 + 1, dtype=np.int32)
        self._scratch[:] = 0
        self.inner.fill_mask(self._scratch)
        word, bit = divmod(token, 32)
        return bool((int(self._scratch[word]) >> bit) & 1)

    def _see(self, token: int) -> None:
        """A gate without a shared turn reads the token's text itself (the generator feeds the
        shared one the text it emits, right after the token is advanced)."""
        if self._reads:
            self.turn.feed(self.tokenizer.decode([token]))

    def _sync(self) -> None:
        """Move on from what the turn read since the last token: the block closed by the
        model, or its budget spent.  Runs before every decision, so each reads the turn
        after the last token's text (a shared turn is fed between the gate's calls)."""
        phase = self.turn.phase
        if self.state == "thinking":
            if phase != THINK:
                self.state = "answer_start"
            elif self.tags.budget is not None and self._spent >= self.tags.budget:
                self._closing_at, self.state = 0, "closing"  # the budget is spent: close now
        elif self._unread is not None:
            inside, self._unread = self._unread, None
            if self.state == "watch" and phase == THINK:
                self._spent += inside  # the open tag's own tokens are not thinking
                self._budget_check()

    def advance(self, token: int) -> bool:
        """Route the token by state; the block's end is found in the text, by the turn."""
        self._sync()
        ok = self._advance(token)
        if self._reads:
            self._sync()
        return ok

    def _advance(self, token: int) -> bool:
        if not self.gating:
            return self._watch(token)
        if self.state == "start":
            if token == self.open_ids[0] and not self._inner_allows(token):
                self._see(token)
                self._opening_at = 1
                if len(self.open_ids) > 1:
                    self.state = "opening"
                else:
                    self._think()
                return True
            self.state = "answer"
            return self.inner.advance(token)  # type: ignore[union-attr]
        if self.state == "opening":
            if token != self.open_ids[self._opening_at]:
                return False
            self._see(token)
            self._opening_at += 1
            if self._opening_at == len(self.open_ids):
                self._think()
            return True
        if self.state == "thinking":
            self._see(token)
            self._spent += 1  # the block's end or its budget: _sync, once the text is read
            return True
        if self.state == "closing":
            if token != self._close_ids[self._closing_at]:
                return False
            self._see(token)
            self._closing_at += 1
            if self._closing_at == len(self._close_ids):
                self.state = "answer_start"
            return True
        if self.state == "answer_start":
            # Whitespace between the close tag and the answer is the template's, not the answer's.
            if token in self._gap_ids and not self._inner_allows(token):
                return True
            self.state = "answer"
        return self.inner.advance(token)  # type: ignore[union-attr]

    def _watch(self, token: int) -> bool:
        """Watch mode: the inner matcher takes every token; the turn counts the block's."""
        if self.state == "closing":
            if token != self._close_ids[self._closing_at]:
                return False
            self._closing_at += 1
            if self._closing_at == len(self._close_ids):
                self.state = "watch"
        if self.inner is not None and not self.inner.advance(token):
            return False
        self._unread = self.turn.phase == THINK
        self._see(token)
        return True

    def _budget_check(self) -> None:
        budget = self.tags.budget
        if budget is not None and self._spent >= budget:
            self._closing_at, self.state = 0, "closing"

    def _think(self) -> None:
        """Enter the block (a zero budget closes it at once)."""
        if not self.gating:
            self._budget_check()
            return
        budget = self.tags.budget
        self.state = "closing" if budget is not None and budget <= 0 else "thinking"

    def forced_tokens(self) -> list[int]:
        """The rest of the open tag while opening, of the close once the budget is spent;
        the inner grammar's once answering (or watching)."""
        self._sync()
        if self.state == "opening":
            return list(self.open_ids[self._opening_at:])
        if self.state == "closing":
            return list(self._close_ids[self._closing_at:])
        if self.state in ("answer", "watch") and self.inner is not None:
            return self.inner.forced_tokens()
        return []

    def is_accepting(self) -> bool:
        """Only a complete answer may end the turn."""
        self._sync()
        if self.inner is None:
            return self.state != "closing"
        return self.state in ("answer", "answer_start", "start", "watch") and self.inner.is_accepting()

    def is_finished(self) -> bool:
        """True once the answer is complete (without a grammar: once the text ended the turn)."""
        self._sync()
        if self.inner is None:
            return self.turn.phase == "done"
        return self.state in ("answer", "watch") and self.inner.is_finished()

    def error(self) -> str | None:
        """The inner matcher's error, or the gate's own."""
        return self.inner.error() if self.inner is not None else None

    @property
    def closing_hints(self) -> ClosingHints:
        """The answer grammar's closing hints (its patterns, raw text's end tags): a closing
        search on the gate searches the answer's grammar."""
        return getattr(self.inner, "closing_hints", NO_HINTS)

    def over_limits(self) -> bool:
        """The inner matcher's verdict: did its engine stop on its budgets?"""
        over = getattr(self.inner, "over_limits", None)
        return bool(over is not None and over())

    def dead_end(self) -> bool:
        """The inner matcher's verdict: can no token extend the answer?"""
        stuck = getattr(self.inner, "dead_end", None)
        return bool(stuck is not None and stuck())

    def respell(self, tokens: Sequence[int]) -> list[tuple[int, int | None]]:
        """The inner matcher's respelling of rejected special tokens (answer phase only: the
        gate's own phases allow what the turn's rules say)."""
        respell = getattr(self.inner, "respell", None)
        self._sync()
        if respell is None or self.state not in ("answer", "watch"):
            return []
        return list(respell(tokens))

    def fork(self) -> ReasoningGate | None:
        """An independent copy in the same state (None if the inner matcher cannot fork)."""
        inner = None
        if self.inner is not None:
            fork_inner = getattr(self.inner, "fork", None)
            inner = fork_inner() if fork_inner is not None else None
            if inner is None:
                return None
        self._sync()
        twin = copy.copy(self)
        twin.inner = inner
        # A fork tries tokens ahead of the text: it reads them itself, on a copy.
        turn = self.turn
        twin.turn = turn.fork_text() if isinstance(turn, Turn) else turn.fork()
        twin._reads = True
        twin._scratch = None
        return twin

    def closing_prefix(self) -> list[int]:
        """The tokens that end the block from here, so that the answer may start: the rest of
        the open tag and the close inside it; nothing where the answer's grammar governs.
        (Closing on length ends a thinking block the budget cannot hold.)"""
        self._sync()
        if self.state == "opening":
            return list(self.open_ids[self._opening_at:]) + list(self.tokenizer.encode(self.tags.close))
        if self.state == "closing":
            return list(self._close_ids[self._closing_at:])
        if self.state == "thinking" or (self.state == "watch" and self.turn.phase == THINK):
            return list(self._close_ids)
        return []

    def closing_root(self) -> ReasoningGate | None:
        """A copy to search the answer's completion from: in the answer state (a completion
        neither opens a block nor writes the gap before the answer), None inside the block
        (end it first: :meth:`closing_prefix`)."""
        self._sync()
        if self.state == "watch":
            return self.fork() if self.turn.phase != THINK else None
        if self.state not in ("start", "answer_start", "answer"):
            return None
        twin = self.fork()
        if twin is not None:
            twin.state = "answer"
        return twin


def detect_reasoning_tags(tokenizer: Tokenizer, prompt_text: str) -> ReasoningTags | None:
    """The reasoning syntax a model uses, if its vocabulary has its tags as tokens, met by the
    prompt's end (:func:`~afm_struct.turn.reasoning.for_prompt`: a block the prompt opened, or
    closed: None, no thinking this turn)."""
    return detect_reasoning(_token_lookup(tokenizer.hf), prompt_text)


def _token_lookup(hf):  # type: ignore[no-untyped-def]
    """``token -> bool``: is it one vocabulary entry?  This runs for every request, on the event
    loop: a fast tokenizer answers by hash lookup, where ``get_vocab()`` builds a 49k-entry dict
    each time (15-27 ms per request with the embedded tokenizer)."""
    backend = getattr(hf, "_tokenizer", None)
    if backend is not None and hasattr(backend, "token_to_id"):
        return lambda token: backend.token_to_id(token) is not None
    vocab = hf.get_vocab()
    return lambda token: token in vocab
