"""A plain content chunk's SSE frame, from a template made once per stream (issue 40).

Every content chunk of a stream after the first, with no logprobs, partial value or token
details, is the same bytes around its content string: the id, creation time, model, index and
nulls.  Building the chunk's dicts and encoding all of them per token was most of a chunk's
encoding on the event loop at 32 streams; here the frame is the template's head, the content's
JSON string and its tail.  The bytes are exactly :func:`~server.sse.encode_event` of
:func:`~server.chat.chunks.delta_chunk`: JSON encodes a dict as the concatenation of its parts'
encodings, with the same string encoder, and the line-break escaping is per character.  The
template is cut at a marker string; where the marker's JSON is not found exactly once (a model
name holding it) there is no template and every chunk is encoded whole.
"""

from __future__ import annotations

from afm_struct.turn.events import ResponseIdentity

from .. import sse
from .chunks import delta_chunk

# Never in a model's output position: the template's content, cut out again below.
_MARK = "\x00afm-content\x00"


class ContentFrames:
    """The SSE frames of one stream's plain content chunks."""

    def __init__(self, ident: ResponseIdentity) -> None:
        whole = sse.encode_event(delta_chunk(ident, {"content": _MARK}))
        parts = whole.split(sse.json_text(_MARK).encode())
        self._around = (parts[0], parts[1]) if len(parts) == 2 else None

    def frame(self, text: str) -> bytes | None:
        """The frame of a chunk whose delta is ``{"content": text}`` and nothing else on its
        choice (None: no template; encode it whole)."""
        if self._around is None:
            return None
        head, tail = self._around
        return head + sse.json_text(text).encode() + tail
