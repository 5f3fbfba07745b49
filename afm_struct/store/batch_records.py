"""What the store keeps for batch jobs: uploaded files, batches and their lines (pure values).

A file and a batch belong to the owner that created them: every read takes the owner, and
another owner's id answers exactly as an unknown one (:func:`unknown_file`,
:func:`unknown_batch`).  A batch's lines move ``pending`` → ``running`` (claimed under a lease)
→ ``done`` (a result stored), or ``skipped`` when the batch is cancelled before they ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import NotFoundError

# Statuses of a batch in which a runner still has work (finalizing: its output files are made).
ACTIVE_STATUSES = ("validating", "in_progress", "finalizing", "cancelling")
# Final statuses: such a batch expires with the store's ttl (a batch still running does not).
ENDED_STATUSES = ("completed", "failed", "cancelled", "expired")


@dataclass(frozen=True)
class StoredFile:
    """An uploaded (or generated) file: its metadata, and its text when asked for."""

    id: str
    owner: str
    purpose: str
    filename: str
    bytes: int
    created_at: int
    content: str | None = None
    # When the store's ttl deletes it (Unix seconds; None: kept until deleted).
    expires_at: int | None = None

    def wire(self) -> dict[str, Any]:
        """The OpenAI file object."""
        return {"id": self.id, "object": "file", "bytes": self.bytes, "created_at": self.created_at,
                "filename": self.filename, "purpose": self.purpose, "status": "processed",
                "expires_at": self.expires_at, "status_details": None}


@dataclass(frozen=True)
class LineCounts:
    """How many lines of a batch are in each state, and how many of the done ones failed."""

    total: int = 0
    pending: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    skipped: int = 0

    @property
    def settled(self) -> bool:
        """No line waits or runs: the batch can be finalized."""
        return self.pending == 0 and self.running == 0


@dataclass(frozen=True)
class ClaimedLine:
    """A line a runner took: its number, ``custom_id`` and request (the JSON text of the line)."""

    batch_id: str
    line: int
    custom_id: str
    request: str
    runs: int


def unknown_file(file_id: str, param: str | None = None) -> NotFoundError:
    """The 404 of a file id this owner does not have (unknown, deleted or another owner's)."""
    return NotFoundError(f"no file {file_id!r}: it is unknown or was deleted", param=param,
                         code="file_not_found")


def unknown_batch(batch_id: str) -> NotFoundError:
    """The 404 of a batch id this owner does not have (unknown or another owner's)."""
    return NotFoundError(f"no batch {batch_id!r}: it is unknown", code="batch_not_found")
