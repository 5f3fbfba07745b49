"""``afm_struct.run_batch``: a JSONL batch file (vLLM's ``run-batch`` format) run in this
process, no server: the library face of ``afm-struct run-batch``.

The lines run through the server's own request path (``server/batches/offline.py``), reached
through :func:`afm_struct.resources.server_module` as the CLI reaches it, so a line is answered
exactly as ``POST`` to its endpoint would be.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ..models.loader import LoadedModel
from ..resources import server_module


def run_batch(input_path: str | os.PathLike[str], output_path: str | os.PathLike[str], *,
              model: LoadedModel | str | None = None, errors_path: str | os.PathLike[str] | None = None,
              concurrency: int = 8, resume: bool = False,
              progress: Callable[[Any], None] | None = None) -> Any:
    """Answer every line of ``input_path`` into ``output_path`` (failed lines into
    ``errors_path`` when given) and return the summary (``BatchSummary``: valid, downgraded,
    failed, skipped, tokens, seconds).  ``model``: a loaded model, or what ``load_model`` takes
    (None: the embedded model).  ``resume`` skips the lines already answered in the output."""
    if not isinstance(model, LoadedModel):
        from ..models import load_model

        model = load_model(model)
    offline = server_module("batches.offline")
    return offline.run_batch(model, input_path, output_path, errors_path=errors_path,
                             concurrency=concurrency, resume=resume, progress=progress)
