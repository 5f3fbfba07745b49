"""A writer process of the concurrency test: ``python -m tests.store.writers SPEC WRITER COUNT GO``.

Opens the store ``SPEC``, waits until the file ``GO`` exists (so every writer starts at once),
then stores COUNT responses ``w<WRITER>-<n>``, each continuing the one before, for the owner
``tenant-<WRITER % 2>`` (writers 0 and 2 share an owner), printing each id once ``put``
returned.  Exits 0 when all are stored.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from afm_struct.store import StoredResponse, open_store


def owner_of(writer: int) -> str:
    """The owner writer ``writer`` stores for."""
    return f"name:tenant-{writer % 2}"


def main(spec: str, writer: int, count: int, go: Path) -> int:
    store = open_store(spec)
    deadline = time.monotonic() + 60
    while not go.exists():
        if time.monotonic() > deadline:
            return 3
        time.sleep(0.005)
    previous = None
    for n in range(count):
        rid = f"w{writer}-{n}"
        store.put(StoredResponse(
            id=rid, owner=owner_of(writer), status="completed", created_at=int(time.time()), model="m",
            previous_response_id=previous,
            input_items=[{"type": "message", "role": "user", "content": f"{rid} in"}],
            output_items=[{"type": "message", "role": "assistant", "content": f"{rid} out"}]))
        print(rid, flush=True)  # stored: the kill test holds the store to every id printed
        previous = rid
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])))
