"""Reasoning gating: no grammar mask inside a thinking block; the constraint governs the answer.

:class:`ReasoningGate` wraps any :class:`~afm_struct.grammar.engine.Matcher` and is one itself,
so the loop does not change.  States: ``start`` (the answer's grammar, plus the first token of
the open tag), ``opening`` (the rest of the open tag is forced), ``thinking`` (everything
allowed, EOS excluded, until the close tag appears in the text), ``closing`` (the tags'
``budget`` of thinking tokens is spent: the close tag is forced) and ``answer`` (delegates to
the wrapped matcher from its start state).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from ..grammar.engine import BatchFill, Matcher
from .masking import set_tokens

# Tag pairs chat templates use for thinking blocks.
THINK_TAGS: tuple[tuple[str, str], ...] = (
    ("<think>", "</think>"),
    ("<thinking>", "</thinking>"),
    ("<|begin_of_thought|>", "<|end_of_thought|>"),
    ("◁think▷", "◁/think▷"),
    ("[THINK]", "[/THINK]"),  # Magistral
)


@dataclass(frozen=True)
class ReasoningTags:
    """The open/close pair of one model, and whether the prompt already opened the block."""

    open: str = "<think>"
    close: str = "</think>"
    opened_in_prompt: bool = False
    # Thinking tokens allowed (max_reasoning_tokens); then the close tag is forced.  None: no limit.
    budget: int | None = None


class ReasoningGate:
    """A matcher that lets a thinking block through unconstrained before ``inner`` applies."""

    def __init__(self, inner: Matcher, tokenizer, tags: ReasoningTags) -> None:
        self.inner = inner
        self.tokenizer = tokenizer
        self.tags = tags
        self.open_ids = tokenizer.encode(tags.open)
        self.state = "start"
        self._opening_at = 0
        self._spent = 0  # thinking tokens so far
        self._close_ids = tokenizer.encode(tags.close)
        self._closing_at = 0
        if tags.opened_in_prompt:
            self._think()
        self._text = ""
        self._scratch: np.ndarray | None = None
        # Line breaks a model writes after the close tag, allowed before the answer starts.
        self._gap_ids = sorted({ids[0] for ids in (tokenizer.encode(t) for t in ("\n", "\n\n", " "))
                                if len(ids) == 1})

    def fill_mask(self, row: np.ndarray) -> None:
        """The inner mask, widened or replaced according to the state."""
        if self.state == "thinking":
            row[:] = -1
            set_tokens(row, self.tokenizer.eos_token_ids, False)
        elif self.state == "closing":
            row[:] = 0
            set_tokens(row, [self._close_ids[self._closing_at]], True)
        elif self.state == "opening":
            row[:] = 0
            set_tokens(row, [self.open_ids[self._opening_at]], True)
        else:
            self.inner.fill_mask(row)
            if self.state == "start":
                set_tokens(row, [self.open_ids[0]], True)
            elif self.state == "answer_start":
                set_tokens(row, self._gap_ids, True)

    def batch_fill(self) -> BatchFill | None:
        """The inner matcher's batch fill while answering (its mask is then the inner's as
        is); None otherwise, and the row is filled on its own."""
        inner = getattr(self.inner, "batch_fill", None)
        return inner() if self.state == "answer" and inner is not None else None

    def _inner_allows(self, token: int) -> bool:
        if self._scratch is None:
            self._scratch = np.zeros((self.tokenizer.vocab_size + 31) // 32 + 1, dtype=np.int32)
        self._scratch[:] = 0
        self.inner.fill_mask(self._scratch)
        word, bit = divmod(token, 32)
        return bool((int(self._scratch[word]) >> bit) & 1)

    def advance(self, token: int) -> bool:
        """Route the token by state; the close tag is found in the decoded text."""
        if self.state == "start":
            if token == self.open_ids[0] and not self._inner_allows(token):
                self._opening_at = 1
                if len(self.open_ids) > 1:
                    self.state = "opening"
                else:
                    self._think()
                return True
            self.state = "answer"
            return self.inner.advance(token)
        if self.state == "opening":
            if token != self.open_ids[self._opening_at]:
                return False
            self._opening_at += 1
            if self._opening_at == len(self.open_ids):
                self._think()
            return True
        if self.state == "thinking":
            self._text += self.tokenizer.decode([token])
            self._spent += 1
            if self.tags.close in self._text[-(len(self.tags.close) + 16):]:
                self.state = "answer_start"
            elif self.tags.budget is not None and self._spent >= self.tags.budget:
                self._closing_at, self.state = 0, "closing"  # the budget is spent: close now
            return True
        if self.state == "closing":
            if token != self._close_ids[self._closing_at]:
                return False
            self._closing_at += 1
            if self._closing_at == len(self._close_ids):
                self.state = "answer_start"
            return True
        if self.state == "answer_start":
            # Whitespace between the close tag and the answer is the template's, not the answer's.
            if token in self._gap_ids and not self._inner_allows(token):
                return True
            self.state = "answer"
        return self.inner.advance(token)

    def _think(self) -> None:
        """Enter the block (a zero budget closes it at once)."""
        budget = self.tags.budget
        self.state = "closing" if budget is not None and budget <= 0 else "thinking"

    def forced_tokens(self) -> list[int]:
        """The rest of the open tag while opening, of the close tag once the budget is spent;
        the inner grammar's once answering."""
        if self.state == "opening":
            return list(self.open_ids[self._opening_at:])
        if self.state == "closing":
            return list(self._close_ids[self._closing_at:])
        if self.state == "answer":
            return self.inner.forced_tokens()
        return []

    def is_accepting(self) -> bool:
        """Only a complete answer may end the turn."""
        return self.state in ("answer", "answer_start", "start") and self.inner.is_accepting()

    def is_finished(self) -> bool:
        """True once the answer is complete."""
        return self.state == "answer" and self.inner.is_finished()

    def error(self) -> str | None:
        """The inner matcher's error, or the gate's own."""
        return self.inner.error()

    def over_limits(self) -> bool:
        """The inner matcher's verdict: did its engine stop on its budgets?"""
        over = getattr(self.inner, "over_limits", None)
        return bool(over is not None and over())

    def fork(self) -> ReasoningGate | None:
        """An independent copy in the same state (None if the inner matcher cannot fork)."""
        fork_inner = getattr(self.inner, "fork", None)
        inner = fork_inner() if fork_inner is not None else None
        if inner is None:
            return None
        twin = copy.copy(self)
        twin.inner = inner
        twin._scratch = None
        return twin

    def closing_prefix(self) -> list[int]:
        """The tokens that end the block from here, so that the answer may start: the rest of
        the open tag and the close tag inside it; nothing where the answer's grammar governs.
        (Closing on length ends a thinking block the budget cannot hold.)"""
        if self.state == "opening":
            return list(self.open_ids[self._opening_at:]) + list(self.tokenizer.encode(self.tags.close))
        if self.state == "thinking":
            return list(self.tokenizer.encode(self.tags.close))
        if self.state == "closing":
            return list(self._close_ids[self._closing_at:])
        return []

    def closing_root(self) -> ReasoningGate | None:
        """A copy to search the answer's completion from: in the answer state (a completion
        neither opens a block nor writes the gap before the answer), None inside the block
        (end it first: :meth:`closing_prefix`)."""
        if self.state not in ("start", "answer_start", "answer"):
            return None
        twin = self.fork()
        if twin is not None:
            twin.state = "answer"
        return twin


def detect_reasoning_tags(tokenizer, prompt_text: str) -> ReasoningTags | None:
    """The thinking tags a model uses, if its vocabulary has them as special tokens.

    A prompt that ends inside an open block (templates that pre-open ``<think>``) is noted so
    the gate starts in the thinking state.  A prompt that ends with the block already closed
    (Qwen3 with ``enable_thinking: false`` writes an empty ``<think></think>``) means no thinking
    this turn: None, so the answer (and its constraint) starts at the first token.
    """
    has = _token_lookup(tokenizer.hf)
    for open_tag, close_tag in THINK_TAGS:
        if has(open_tag) and has(close_tag):
            tail = prompt_text.rstrip()
            if tail.endswith(close_tag):
                return None
            opened = tail.endswith(open_tag)
            return ReasoningTags(open_tag, close_tag, opened_in_prompt=opened)
    return None


def _token_lookup(hf):  # type: ignore[no-untyped-def]
    """``token -> bool``: is it one vocabulary entry?  This runs for every request, on the event
    loop: a fast tokenizer answers by hash lookup, where ``get_vocab()`` builds a 49k-entry dict
    each time (15-27 ms per request with the embedded tokenizer)."""
    backend = getattr(hf, "_tokenizer", None)
    if backend is not None and hasattr(backend, "token_to_id"):
        return lambda token: backend.token_to_id(token) is not None
    vocab = hf.get_vocab()
    return lambda token: token in vocab
