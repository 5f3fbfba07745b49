"""The one path every log line takes: request and output text redacted unless ``--log-content``.

docs/deploy.md promises that no prompt or generated text is logged without ``--log-content``.
The request line (``server.observe``) adds content only when asked; other lines carry text they
did not write: the grammar engine's error message (llguidance's ``Tokens: ⟦…⟧`` dump of the
generated tokens, the parser's ``token "…"``/``forced bytes`` and the request's grammar), an
exception's message or traceback (a validation error's ``input_value=…``).  So every record
goes through :class:`ContentRedaction`, a filter on the handler (and so on every logger,
uvicorn's included), which rewrites the formatted message and the exception text with
:func:`redact`.  A log line keeps what an operator needs (what failed, the stop reason, the
engine's statistics, the request ID); the text is replaced by its length.
"""

from __future__ import annotations

import logging
import re

# Text an engine or library quotes from the request or the output, by its shape.
_BLOCKS = [
    # llguidance's dump of the request's grammar (its schema, regex or Lark text).
    (re.compile(r"<grammar>.*?(</grammar>|\Z)", re.DOTALL),
     lambda m: f"<grammar {len(m.group(0))} chars redacted>"),
    # llguidance's token dump: ⟦tok‧tok‧…⟧.
    (re.compile(r"⟦.*?(⟧|\Z)", re.DOTALL), lambda m: f"⟦{len(m.group(0)) - 2} chars redacted⟧"),
]
# A quoted stretch after a word that introduces request or output text (the parser's
# ``token "…"``, ``got '…'; applying '…'``, ``grm_prefix: "…"``, pydantic's ``input_value='…'``).
_QUOTED = re.compile(
    r"""(?P<lead>\b(?:token|got|applying|grm_prefix:?|input_value=|input=|value=|text|prefix|content)\s*)"""
    r"""(?P<q>["'])(?P<body>(?:\\.|(?!(?P=q)).)*)(?P=q)""", re.DOTALL)


def redact(text: str) -> str:
    """``text`` with the request and output text it quotes replaced by their lengths."""
    if not text:
        return text
    for pattern, replace in _BLOCKS:
        text = pattern.sub(replace, text)
    return _QUOTED.sub(lambda m: f"{m.group('lead')}<{len(m.group('body'))} chars redacted>", text)


class ContentRedaction(logging.Filter):
    """A handler filter: every record's message and exception text through :func:`redact`."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite ``record`` in place; never drops one."""
        if isinstance(record.args, tuple) and record.name == "uvicorn.access":
            # uvicorn's access formatter unpacks the args (client, method, path, version,
            # status): merged into the message, every access line failed to format and printed
            # a traceback instead (~5 % of the event loop's time under load).  Each one redacted.
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
            return True
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: its format string alone
            message = str(record.msg)
        redacted = redact(message)
        if redacted != message:  # else the record stays whole, arguments and all
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        # A formatter re-formats exc_info when exc_text is unset; with it set, the redacted
        # text is what goes out.
        return True
