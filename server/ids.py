"""Where a response's random values come from: its ids and its ``created`` time.

One injectable source on the server state: every protocol draws its ids the same way, and a
test fixes them (the chat wire capture, ``tests/server/test_wire_capture.py``) by replacing it.
"""

from __future__ import annotations

import secrets
import time


class IdSource:
    """Random ids (a prefix and 24 hex digits) and the wall-clock ``created`` timestamp."""

    def new_id(self, prefix: str) -> str:
        """A fresh id: ``chatcmpl-…`` for a completion, ``call_…`` for a tool call."""
        return prefix + secrets.token_hex(12)

    def created(self) -> int:
        """The Unix time a response reports as created."""
        return int(time.time())
