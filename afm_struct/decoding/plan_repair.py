"""A closing plan repaired after a token off it, without a search.

The budget closer (:mod:`.length_close`) holds ``plan``, the fewest tokens known to complete
the grammar from the current state.  When the model writes a token ``t`` that is not
``plan[0]``, the completion after ``t`` is most often the run the grammar forces after ``t``
followed by a tail of ``plan``: ``"`` where the plan had ``",`` (the comma is forced, then the
plan's rest), ``ti`` where the plan spelled ``title`` (``tle": "`` is forced), ``}"`` where it
had ``}`` then ``"``.  Trying the tails costs a few probes (a rejected token ~0.4 µs with
llguidance); a search costs hundreds of masks.  A tail is kept only after a fork of the matcher
walked it to a complete state, the same proof a search's result has, so a repaired plan is as
valid as a searched one; it is not always the shortest completion after ``t``.

Where no token tail fits, the plan's *text* often still does when its first tokens are cut at
a character: the model wrote `` `` where the plan had `` "`` (then ``"`` and the plan's rest),
or string content after a quote that the plan's ``""`` closed.  :func:`text_repaired_plan`
tries those cuts, each rest spelled as one or two tokens of the closing vocabulary (a dict lookup,
not the tokenizer: its ``encode`` costs ~0.1-0.3 ms a call).  Issue 40: with the served
stand-in these were half the closing searches, ~3 ms each.  Its result is an upper bound on
the shortest completion, so the closer takes it only far from the cut.
"""

from __future__ import annotations

import weakref

from ..grammar.closer.search import accepts, fork_of, is_complete
from ..grammar.closer.vocab import ClosingVocab
from ..grammar.engines.protocol import Matcher

# The plan's first tokens that a text repair cuts inside.
CUT_TOKENS = 2
# A closing vocabulary's spellings, text -> token (built once per vocabulary).
_SPELLINGS: weakref.WeakKeyDictionary[ClosingVocab, dict[str, int]] = weakref.WeakKeyDictionary()


def _after(matcher: Matcher, token: int, room: int) -> tuple[Matcher, list[int]] | None:
    """A fork of ``matcher`` past ``token`` and the run the grammar then forces, and that run;
    None when the grammar rejects them or the run alone exceeds ``room``."""
    probe = fork_of(matcher)
    if probe is None or not probe.advance(token):
        return None
    forced = probe.forced_tokens()
    if len(forced) > room or not all(probe.advance(t) for t in forced):
        return None
    return probe, forced


def _spelled(text: str, spell: dict[str, int]) -> list[list[int]]:
    """``text`` as one token of ``spell``, or as two (each split point)."""
    one = [[spell[text]]] if text in spell else []
    return one + [[spell[text[:k]], spell[text[k:]]] for k in range(1, len(text))
                  if text[:k] in spell and text[k:] in spell]


def _completes(probe: Matcher, tail: list[int]) -> bool:
    """``tail`` taken from ``probe`` (not touched) ends complete: walked on a fork."""
    if tail and not accepts(probe, tail):  # most candidates fail at their first token
        return False
    end = fork_of(probe) if tail else probe
    return end is not None and all(end.advance(t) for t in tail) and is_complete(end)


def repaired_plan(matcher: Matcher, token: int, plan: list[int], room: int) -> list[int] | None:
    """The run forced after ``token`` then the shortest tail of ``plan`` that the grammar takes
    from there and ends complete in, if it fits ``room`` tokens (counted as the generator
    counts them: the forced run first); None when no tail does (search instead).  ``matcher``
    (before ``token``) is not touched."""
    after = _after(matcher, token, room)
    if after is None:
        return None
    probe, forced = after
    for k in range(len(plan), -1, -1):  # shortest tail first
        tail = plan[k:]
        if len(forced) + len(tail) > room:
            return None
        if _completes(probe, tail):
            return forced + tail
    return None


def text_repaired_plan(matcher: Matcher, token: int, plan: list[int], room: int,
                       vocab: ClosingVocab) -> list[int] | None:
    """The run forced after ``token`` then ``plan`` with one of its first :data:`CUT_TOKENS`
    tokens cut at a character (the tokens before it dropped, the rest of its text spelled as
    one or two tokens of ``vocab``), the shortest such that completes the grammar within ``room``
    (walked on a fork, as :func:`repaired_plan`'s); None when none does.  ``matcher`` (before
    ``token``) is not touched."""
    after = _after(matcher, token, room)
    if after is None:
        return None
    probe, forced = after
    spell = _SPELLINGS.get(vocab)
    if spell is None:
        spell = _SPELLINGS.setdefault(vocab, {text: int(t) for t, text in zip(vocab.tokens, vocab.texts,
                                                                               strict=True)})
    tails = []
    for j, t in enumerate(plan[:CUT_TOKENS]):
        text = vocab.text_of.get(t, "")
        for c in range(1, len(text)):
            tails += [[*spelled, *plan[j + 1:]] for spelled in _spelled(text[c:], spell)]
    for tail in sorted(tails, key=len):
        if len(forced) + len(tail) > room:
            return None
        if _completes(probe, tail):
            return forced + tail
    return None
