"""Where the model is in its turn: one text state machine, read by the generator and the routers.

A model's reasoning syntax is data (:class:`ReasoningTags`, one entry of :data:`SYNTAXES` per
family): the block's open and close tags, the text that leaves the block when its budget is
spent, the framing between messages that is never content (Harmony's ``<|start|>assistant``),
and the texts that end the turn (Harmony's ``<|call|>``).  :class:`TurnText` follows generated
text through it, over the :class:`~afm_struct.turn.markers.MarkerScanner`, in the phases
``think`` / ``content`` / ``done``, and cuts it into ``(channel, text)`` pieces.  It is the
reasoning layer of the request's :class:`afm_struct.turn.turn.Turn`, whose phase the
generator's reasoning gate reads (the mask, the budget's forced close, the end of the turn;
``afm_struct/decoding/reasoning_gate.py``) and whose events are made from these pieces; the rules:

* text between the open and close tags is reasoning; the tags are removed; whitespace right
  after a closed block is the template's, not the answer's, and is dropped;
* the block may have been opened by the prompt (``start_in_reasoning``), and a prompt that ends
  with the block already closed means no thinking this turn (:func:`for_prompt`, the one copy of
  that rule);
* a tag that opens or closes nothing and the syntax's framing are dropped, and so is a tag the
  end of the text cut (``</thi``, ``<|channel|>analysis<``): only a lone held character (``<``)
  is as likely text, and goes out;
* an end-of-turn text is given out (a tool router reads Harmony's ``<|call|>`` as a call's close)
  and moves the turn to ``done``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace

from .markers import Marker, MarkerScanner

REASONING = "reasoning"
ANSWER = "answer"

THINK = "think"
CONTENT = "content"
DONE = "done"


@dataclass(frozen=True)
class ReasoningTags:
    """One reasoning syntax, and how one request meets it (``opened_in_prompt``, ``budget``)."""

    open: str = "<think>"
    close: str = "</think>"
    opened_in_prompt: bool = False
    # Thinking tokens allowed (max_reasoning_tokens); then the block is left.  None: no limit.
    budget: int | None = None
    # The text forced to leave the block ("": the close tag); Harmony's starts the next message.
    leave: str = ""
    # Framing between messages, never content (Harmony's message starts and channel headers).
    markup: tuple[str, ...] = ()
    # Texts after which the turn is over (Harmony's <|call|> and <|return|>).
    ends: tuple[str, ...] = ()
    # Vocabulary entries that identify the syntax (default: the open and close tags).
    keys: tuple[str, ...] = ()
    # True: a grammar's mask may open the block itself (its open tag's first token is its own).
    # False (Harmony: ``<|channel|>`` also starts the answer's channels): the block is written
    # by the grammar or not at all, and the gate only watches it.
    gated: bool = True
    # Special-token texts that are structure wherever they stand (Harmony's ``<|channel|>``):
    # one that no marker read (sampled before text that names no channel) is dropped.
    tokens: tuple[str, ...] = ()

    def drop_tokens(self, text: str) -> str:
        """``text`` without the syntax's :attr:`tokens`."""
        for token in self.tokens:
            text = text.replace(token, "")
        return text

    @property
    def pair(self) -> tuple[str, str]:
        """``(open, close)``."""
        return (self.open, self.close)

    @property
    def leave_text(self) -> str:
        """The text that leaves the block."""
        return self.leave or self.close

    @property
    def texts(self) -> tuple[str, ...]:
        """The texts of the syntax a router reads and removes (kept when special tokens are
        hidden; the end texts are not: the turn is over there)."""
        return (self.open, self.close, *self.markup)


# The reasoning syntaxes of the model families, first match wins (detect_reasoning).  The next
# syntax of an existing kind is one entry here.
SYNTAXES: tuple[ReasoningTags, ...] = (
    ReasoningTags("<think>", "</think>"),
    ReasoningTags("<thinking>", "</thinking>"),
    ReasoningTags("<|begin_of_thought|>", "<|end_of_thought|>"),
    ReasoningTags("◁think▷", "◁/think▷"),
    ReasoningTags("[THINK]", "[/THINK]"),  # Magistral
    # gpt-oss Harmony: the analysis channel is reasoning; the final channel is content.
    ReasoningTags("<|channel|>analysis<|message|>", "<|end|>", leave="<|end|><|start|>assistant",
                  markup=("<|start|>assistant", "<|channel|>final<|message|>",
                          "<|channel|>commentary<|message|>"),
                  ends=("<|call|>", "<|return|>"), keys=("<|channel|>", "<|message|>", "<|end|>"),
                  gated=False, tokens=("<|start|>", "<|channel|>", "<|message|>", "<|end|>",
                                       "<|constrain|>", "<|call|>", "<|return|>")),
)

# (open, close) of every syntax.
THINK_TAGS: tuple[tuple[str, str], ...] = tuple(s.pair for s in SYNTAXES)


def for_prompt(tags: ReasoningTags, prompt_tail: str) -> ReasoningTags | None:
    """The one rule for a prompt's end: one that ends inside an open block (templates that
    pre-open ``<think>``) starts the turn thinking; one that ends with the block closed (Qwen3
    with ``enable_thinking: false`` writes an empty ``<think></think>``) means no thinking this
    turn: None, so the answer (and its constraint) starts at the first token."""
    tail = prompt_tail.rstrip()
    if tail.endswith(tags.close):
        return None
    return replace(tags, opened_in_prompt=tail.endswith(tags.open))


def syntax_of(pair: tuple[str, str] | None) -> ReasoningTags | None:
    """The syntax of :data:`SYNTAXES` with these ``(open, close)`` tags (a tool format names its
    own reasoning channel so: Harmony's analysis); an unknown pair is a syntax the grammar
    writes (not gated); None for None."""
    if pair is None:
        return None
    for syntax in SYNTAXES:
        if syntax.pair == tuple(pair):
            return syntax
    return ReasoningTags(*pair, gated=False)


def detect_reasoning(has_token, prompt_tail: str) -> ReasoningTags | None:  # type: ignore[no-untyped-def]
    """The first syntax of :data:`SYNTAXES` whose identifying tokens ``has_token`` (``str ->
    bool``) finds in the vocabulary, met by the prompt (:func:`for_prompt`); None if none."""
    for syntax in SYNTAXES:
        if all(has_token(k) for k in (syntax.keys or syntax.pair)):
            return for_prompt(syntax, prompt_tail)
    return None


class TurnText:
    """The phase of a turn (``think`` / ``content`` / ``done``) as its text streams, and the
    text cut into ``(channel, text)`` pieces (channel ``reasoning`` or ``answer``).

    ``tags=None``: no reasoning syntax, everything is the answer and the turn never ends by text.
    """

    def __init__(self, tags: ReasoningTags | tuple[str, str] | None, *,
                 start_in_reasoning: bool = False) -> None:
        if isinstance(tags, tuple):
            tags = ReasoningTags(*tags)
        self.syntax = tags
        self.phase = THINK if tags is not None and start_in_reasoning else CONTENT
        self._after = False  # just after a block: leading whitespace is dropped
        self._scan = MarkerScanner(self._looking_for())

    @property
    def tags(self) -> tuple[str, str] | None:
        """``(open, close)``, or None without a syntax."""
        return self.syntax.pair if self.syntax is not None else None

    @property
    def inside(self) -> bool:
        """True inside the reasoning block."""
        return self.phase == THINK

    def fork(self) -> TurnText:
        """An independent copy in the same phase (the closing search steps copies)."""
        twin = copy.copy(self)
        twin._scan = self._scan.fork()
        return twin

    def feed(self, text: str, *, final: bool = False) -> list[tuple[str, str]]:
        """``(channel, text)`` pieces made available by ``text``.  ``final``: the end of the text
        (a held partial tag is dropped, a lone held character given out as text)."""
        syntax = self.syntax
        if syntax is None:
            return [(ANSWER, text)] if text else []
        out: list[tuple[str, str]] = []
        for piece in self._scan.feed(text):
            if not isinstance(piece, Marker):
                self._put(out, piece)
            elif piece.text == syntax.open and self.phase != THINK:
                self.phase = THINK
            elif piece.text == syntax.close and self.phase == THINK:
                self.phase, self._after = CONTENT, True
            elif piece.text in syntax.ends and self.phase != THINK:
                self._put(out, piece.text)  # the routers read it (a call's close)
                self.phase = DONE
            # Otherwise structure, never text: a tag that opens or closes nothing (a model
            # repeating itself), or the framing between messages.
            self._scan.markers = self._looking_for()
        if final:
            held = self._scan.take()  # a tag the end cut is structure; a lone "<" may be text
            if len(held) < 2:
                self._put(out, held)
        return out

    def unseen(self, text: str) -> None:
        """A token whose text is never shown (a hidden special token) was generated: only an end
        text means something here (Harmony's ``<|return|>``: the turn is over)."""
        syntax = self.syntax
        if syntax is not None and text in syntax.ends and self.phase != THINK:
            self.phase = DONE

    def _looking_for(self) -> tuple[str, ...]:
        syntax = self.syntax
        if syntax is None:
            return ()
        if self.phase == THINK:
            return syntax.pair
        return (*syntax.pair, *syntax.markup, *syntax.ends)

    def _put(self, out: list[tuple[str, str]], text: str) -> None:
        if self.phase != THINK and self._after:
            text = text.lstrip()
            if not text:
                return
            self._after = False
        if self.phase == THINK and self.syntax is not None:  # no router reads reasoning further
            text = self.syntax.drop_tokens(text)
        if text:
            out.append((REASONING if self.phase == THINK else ANSWER, text))


# The name the reasoning split has had.
ReasoningSplitter = TurnText
