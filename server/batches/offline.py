"""A batch file run without a server: ``afm-struct run-batch`` and ``afm_struct.run_batch``.

vLLM's ``run-batch`` format: each input line is ``{custom_id, method, url, body}`` for
``/v1/chat/completions``, ``/v1/responses`` or ``/v1/completions`` (mixed as they come), and
each output line is OpenAI's batch output line.  Lines run through the same path as the
server's (:func:`.line_run.answer_line`) on a scheduler of this process, ``concurrency`` at a
time; each result is appended and flushed as it completes (in completion order: ``custom_id``
says which line it answers).  Failed lines go to ``errors`` when given, else to the output.
With ``resume``, lines whose ``custom_id`` already has a complete line in the output (or the
error file) are skipped, and a line cut by a crash mid-write is dropped first.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from afm_struct.decoding.generator import Generator
from afm_struct.decoding.scheduler import Scheduler, SchedulerLimits
from afm_struct.errors import InvalidRequestError, OverloadedError
from afm_struct.models.loader import LoadedModel

from ..cancel import InflightRegistry
from ..settings import ServerSettings
from ..state import ServerState
from ..structured import default_compiler
from .batch_lines import RequestLine, duplicate_ids, output_line, read_line
from .line_run import answer_line

OWNER = "run-batch"


@dataclass
class BatchSummary:
    """How a run went: lines answered (valid, downgraded: a strict grammar ran best-effort;
    failed: the endpoint refused or failed them), lines skipped on resume, tokens and time."""

    lines: int = 0
    valid: int = 0
    downgraded: int = 0
    failed: int = 0
    skipped: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    started: float = field(default_factory=time.perf_counter, repr=False)

    @property
    def done(self) -> int:
        """Lines answered so far."""
        return self.valid + self.downgraded + self.failed

    def tokens_per_s(self) -> float:
        """Completion tokens per second of wall time so far."""
        elapsed = time.perf_counter() - self.started
        return self.completion_tokens / elapsed if elapsed > 0 else 0.0

    def eta_s(self) -> float | None:
        """Seconds left at the pace so far (None before the first line)."""
        if not self.done:
            return None
        elapsed = time.perf_counter() - self.started
        return elapsed / self.done * (self.lines - self.done)

    def text(self) -> str:
        """The end summary, one line."""
        return (f"{self.done} lines in {self.seconds:.1f} s: {self.valid} valid, {self.downgraded} "
                f"downgraded, {self.failed} failed ({self.skipped} already done); {self.prompt_tokens} "
                f"prompt + {self.completion_tokens} completion tokens, {self.tokens_per_s():.1f} tok/s")

    def progress(self) -> str:
        """The progress line: lines done, tok/s, ETA."""
        eta = self.eta_s()
        left = "?" if eta is None else f"{int(eta) // 60}:{int(eta) % 60:02d}"
        return f"{self.done}/{self.lines} lines, {self.tokens_per_s():.1f} tok/s, ETA {left}"


def _usage(body: dict[str, Any]) -> tuple[int, int]:
    usage = body.get("usage") or {}
    prompt = usage.get("prompt_tokens", usage.get("input_tokens", 0))
    completion = usage.get("completion_tokens", usage.get("output_tokens", 0))
    return int(prompt or 0), int(completion or 0)


def done_ids(*paths: Path | None) -> set[str]:
    """The ``custom_id`` of every complete line of these output files; a torn last line (a crash
    mid-write) is cut off the file."""
    done: set[str] = set()
    for path in paths:
        if path is None or not path.exists():
            continue
        data = path.read_bytes()
        whole = data[:data.rfind(b"\n") + 1]
        if len(whole) != len(data):
            with open(path, "r+b") as f:
                f.truncate(len(whole))
        for text in whole.decode("utf-8", "replace").splitlines():
            try:
                custom_id = json.loads(text).get("custom_id")
            except (ValueError, AttributeError):
                continue
            if isinstance(custom_id, str):
                done.add(custom_id)
    return done


def read_input(path: Path) -> list[RequestLine]:
    """The input file's lines (a bad one carries its problem; duplicate ids are refused)."""
    try:
        texts = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"cannot read the batch input {path}: {exc}") from None
    lines = [read_line(text, n + 1) for n, text in enumerate(texts) if text.strip()]
    duplicate = duplicate_ids(lines)
    if duplicate is not None:
        raise InvalidRequestError(f"{path}: {duplicate.message.removeprefix('input_file_id: ')}")
    return lines


def _state(loaded: LoadedModel, concurrency: int) -> ServerState:
    settings = ServerSettings(max_active=concurrency, max_queue=concurrency)
    scheduler = Scheduler(Generator.from_loaded(loaded),
                          SchedulerLimits(max_active=concurrency, max_queue=concurrency,
                                          retry_after_s=1, join_wait_ms=settings.join_wait_ms))
    scheduler.start()
    return ServerState(loaded=loaded, settings=settings, scheduler=scheduler,
                       registry=InflightRegistry(settings.recent_ids), compile_fn=default_compiler())


async def run_batch_file(loaded: LoadedModel, input_path: Path, output_path: Path, *,
                         errors_path: Path | None = None, concurrency: int = 8, resume: bool = False,
                         progress: Callable[[BatchSummary], None] | None = None) -> BatchSummary:
    """Run every line of ``input_path`` on ``loaded`` and write the answers (see the module
    docstring); ``progress`` is called after each line."""
    if concurrency < 1:
        raise InvalidRequestError(f"concurrency must be >= 1, not {concurrency}")
    lines = read_input(input_path)
    skip = done_ids(output_path, errors_path) if resume else set()
    todo = [line for line in lines if line.custom_id is None or line.custom_id not in skip]
    summary = BatchSummary(lines=len(todo), skipped=len(lines) - len(todo))
    mode = "a" if resume else "w"
    state = _state(loaded, concurrency)
    try:
        with open(output_path, mode, encoding="utf-8") as out, \
                (open(errors_path, mode, encoding="utf-8") if errors_path else _Nothing()) as err:
            pending: Iterator[RequestLine] = iter(todo)

            async def worker() -> None:
                for line in pending:
                    record = await _answer(state, line, summary)
                    target = err if errors_path is not None and not record["ok"] else out
                    target.write(json.dumps(record["line"]) + "\n")
                    target.flush()
                    if progress is not None:
                        progress(summary)

            await asyncio.gather(*(worker() for _ in range(min(concurrency, max(1, len(todo))))))
            os.fsync(out.fileno())
    finally:
        state.scheduler.stop()
    summary.seconds = time.perf_counter() - summary.started
    return summary


async def _answer(state: ServerState, line: RequestLine, summary: BatchSummary) -> dict[str, Any]:
    if line.problem is not None:
        summary.failed += 1
        return {"ok": False, "line": output_line(line.custom_id, error=line.problem)}
    assert line.url is not None and line.body is not None
    request_id = state.ids.new_id("batchreq-")
    while True:
        try:
            answer = await answer_line(state, None, OWNER, line.url, line.body, request_id)
            break
        except OverloadedError:  # not expected with one worker per row; wait for a row
            await asyncio.sleep(0.05)
    prompt, completion = _usage(answer.body)
    summary.prompt_tokens += prompt
    summary.completion_tokens += completion
    ok = answer.status == 200
    if not ok:
        summary.failed += 1
    elif answer.downgraded:
        summary.downgraded += 1
    else:
        summary.valid += 1
    return {"ok": ok, "line": output_line(line.custom_id, status_code=answer.status, request_id=request_id,
                                          body=answer.body)}


class _Nothing:
    """A stand-in for the error file when there is none."""

    def __enter__(self) -> IO[str] | None:
        return None

    def __exit__(self, *_: object) -> None:
        return None


def run_batch(loaded: LoadedModel, input_path: str | os.PathLike[str], output_path: str | os.PathLike[str],
              *, errors_path: str | os.PathLike[str] | None = None, concurrency: int = 8,
              resume: bool = False, progress: Callable[[BatchSummary], None] | None = None) -> BatchSummary:
    """:func:`run_batch_file` from synchronous code (its own event loop)."""
    return asyncio.run(run_batch_file(loaded, Path(input_path), Path(output_path),
                                      errors_path=None if errors_path is None else Path(errors_path),
                                      concurrency=concurrency, resume=resume, progress=progress))
