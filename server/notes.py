"""Response headers that say how a request was read where it was not taken literally.

Agent harnesses send what this server cannot run on every turn; it is served without it, and
the response says so (docs/protocol.md, "What agent clients send"):

* ``X-AFM-Ignored-Tools``: the hosted tools (web search, code execution, computer use, ...) and
  tool namespaces left out of the tool set, by name (or type, when they have none), comma-separated;
* ``X-AFM-Max-Tokens-Clamped``: the output budget asked for, more than the context holds (the
  Responses API: beyond the whole context; the Messages API, whose ``max_tokens`` every client
  must send, Claude Code 64,000: beyond what the prompt leaves): it ran as a ceiling, lowered to
  what the prompt left.
"""

from __future__ import annotations

from collections.abc import Sequence

IGNORED_TOOLS_HEADER = "X-AFM-Ignored-Tools"
CLAMPED_HEADER = "X-AFM-Max-Tokens-Clamped"


def clamped(asked: int | None, context_length: int) -> bool:
    """``asked`` output tokens can never fit the context (whatever the prompt): a ceiling."""
    return asked is not None and asked > context_length


def note_headers(ignored_tools: Sequence[str] = (), clamped_from: int | None = None) -> dict[str, str]:
    """The headers for the tools left out and a budget clamped (none when neither happened)."""
    headers: dict[str, str] = {}
    if ignored_tools:
        # Header values are latin-1 on the wire: a name outside it is written escaped.
        names = ", ".join(ignored_tools)
        headers[IGNORED_TOOLS_HEADER] = names.encode("latin-1", "backslashreplace").decode("latin-1")
    if clamped_from is not None:
        headers[CLAMPED_HEADER] = str(clamped_from)
    return headers
