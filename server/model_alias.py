"""Model aliases: ``--model-alias 'claude-*=NAME'`` lets a client's hard-coded model names reach
the served model.

Agent tools name models the server does not serve (Claude Code sends ``claude-opus-4-…`` and
``claude-haiku-…``, Codex CLI ``gpt-5-codex``).  An alias is a glob pattern (``fnmatch``:
``*``, ``?``, ``[...]``; case-sensitive) and the served name a matching request is served as;
the first pattern that matches wins.  A name the server serves is never aliased, and a name no
alias matches is still a 404 naming what to send.  ``*=NAME`` makes the server answer to any name.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase


@dataclass(frozen=True)
class ModelAlias:
    """Requests naming a model that matches ``pattern`` are served as ``target``."""

    pattern: str
    target: str

    def matches(self, name: str) -> bool:
        """``name`` matches the glob pattern (case-sensitive)."""
        return fnmatchcase(name, self.pattern)


def parse_alias(text: str) -> ModelAlias:
    """``PATTERN=NAME`` → a :class:`ModelAlias`; ``ValueError`` naming what is wrong."""
    pattern, sep, target = text.partition("=")
    pattern, target = pattern.strip(), target.strip()
    if not sep or not pattern or not target:
        raise ValueError(f"a model alias is PATTERN=NAME (e.g. 'claude-*=my-model'), not {text!r}")
    return ModelAlias(pattern, target)


def parse_aliases(texts: Iterable[str]) -> tuple[ModelAlias, ...]:
    """Every ``PATTERN=NAME`` of ``texts``, in order."""
    return tuple(parse_alias(t) for t in texts)


def resolve_alias(requested: str, aliases: Sequence[ModelAlias]) -> str | None:
    """The served name ``requested`` is an alias of (the first match), or None."""
    for alias in aliases:
        if alias.matches(requested):
            return alias.target
    return None
