"""The batch runner: one asyncio task in the server that runs the store's batches line by line.

Lines run on the same engine and scheduler as live requests, at a lower priority: the runner
submits a line only while the scheduler has a spare row (``max_active`` minus the requests
active or waiting), and keeps at most ``batch_lines_in_flight`` lines in flight in all
(``batch_lines_with_live`` while live requests run, none new while one waits for its first
token), so live requests find rows free and a batch fills the ones they leave.  The lines are
background requests to the scheduler (``GenerationRequest.background``): live ones start and
prefill before them.  Each line is claimed under a
lease in the store and its result written there as it completes (a durable commit), so a
``kill -9`` loses at most the lines running then: a restart (or another replica on the same
store, once their lease ran out) runs those again, and never a line whose result is stored.
When no line is left, the runner writes the output and error files and completes the batch.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any

from afm_struct.errors import AfmError, InvalidRequestError, OverloadedError
from afm_struct.store import ResponseStore
from afm_struct.store.batch_records import ACTIVE_STATUSES, ClaimedLine, LineCounts, StoredFile

from ..metrics import ServerMetrics
from ..state import ServerState
from .batch_lines import output_line, read_line, refusal
from .line_log import line_record, report_line
from .line_run import LineAnswer, answer_line

log = logging.getLogger("afm_struct.server")
# Seconds between looks at the store when nothing woke the runner (a batch another replica
# created, a lease running out): while a batch is active, and while none is.
POLL_S = 0.5
IDLE_POLL_S = 2.0
# Seconds between looks while lines are held back for a live request (its first token comes
# within a few steps; the batch resumes right after).
HELD_POLL_S = 0.01
# The batch object's field naming the model whose servers run it (not on the wire).
MODEL_KEY = "_model"


class BatchRunner:
    """Runs the store's active batches on ``state``'s engine (start/stop with the app)."""

    def __init__(self, state: ServerState, store: ResponseStore, *,
                 draining: Callable[[], bool] = lambda: False, metrics: ServerMetrics | None = None) -> None:
        self.state = state
        self.metrics = metrics
        self.draining = draining
        self.store: Any = store
        self.lines_in_flight = state.settings.batch_lines_in_flight
        with_live = state.settings.batch_lines_with_live
        self.lines_with_live = self.lines_in_flight if with_live is None else with_live
        self.lease_s = state.settings.batch_lease_s
        self._tasks: dict[asyncio.Task[None], ClaimedLine] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._renewed = 0.0
        self._finalizing: set[str] = set()
        # Whether the last look held lines back for a live request (the next look comes soon).
        self._held = False
        self._ticked = 0.0
        #: Lines this runner answered and stored (a replica's share of the batches it ran).
        self.lines_stored = 0

    def start(self) -> None:
        """Start the runner's task on the running loop."""
        self._task = asyncio.create_task(self._loop(), name="afm-batch-runner")

    def wake(self) -> None:
        """Look at the store now (a batch was created or cancelled, a line finished)."""
        self._wake.set()

    async def stop(self) -> None:
        """Stop taking lines and cancel those in flight, giving them back to the store (so a
        restart runs them at once, without waiting for their lease)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        claims = list(self._tasks.values())
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for claim in claims:
            try:
                await asyncio.to_thread(self.store.release_line, claim)
            except AfmError:
                pass

    async def _loop(self) -> None:
        while True:
            if self._held and self.state.scheduler.live_waiting and time.monotonic() - self._ticked < POLL_S:
                await asyncio.sleep(HELD_POLL_S)  # still held: no need to read the store yet
                continue
            self._ticked = time.monotonic()  # (a tick renews the leases: at least every POLL_S)
            active = True
            try:
                active = await self._tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a store outage: logged, tried again on the next tick
                log.error("batch runner: %s", getattr(exc, "message", None) or repr(exc))
            try:
                wait = HELD_POLL_S if self._held else POLL_S if active else IDLE_POLL_S
                await asyncio.wait_for(self._wake.wait(), wait)
            except TimeoutError:
                pass
            self._wake.clear()

    def _spare(self) -> int:
        """How many more lines may start now: spare engine rows, within the runner's bound
        (``--batch-lines``; ``--batch-lines-live`` while live requests run; none while one
        waits for its first token, nor while the server drains: it is about to stop)."""
        self._held = False
        scheduler = self.state.scheduler
        if self.draining():
            return 0
        if scheduler.live_waiting:
            # A live request waits for its first token: a line starting now would plan,
            # prefill and take a row in the very steps that answer it.
            self._held = True
            return 0
        pending, _capacity = scheduler.load
        rows = scheduler.limits.max_active - pending
        bound = self.lines_with_live if scheduler.live_in_flight else self.lines_in_flight
        return max(0, min(rows, bound - len(self._tasks)))

    async def _tick(self) -> bool:
        """Advance every active batch; whether there was one."""
        now = time.time()
        if self._tasks and now - self._renewed > self.lease_s / 3:
            await asyncio.to_thread(self.store.renew_lines, list(self._tasks.values()), now + self.lease_s)
            self._renewed = now
        batches = await asyncio.to_thread(self.store.active_batches)
        if self.metrics is not None:
            for status in ACTIVE_STATUSES:
                self.metrics.batches.labels(status).set(sum(b["status"] == status for _, b in batches))
        for owner, batch in batches:
            await self._advance(owner, batch)
        return bool(batches)

    def _ours(self, batch_id: str) -> int:
        return sum(1 for claim in self._tasks.values() if claim.batch_id == batch_id)

    async def _advance(self, owner: str, batch: dict[str, Any]) -> None:
        """One step of ``batch``: start it, claim lines into spare rows, or finish it."""
        batch_id, status, now = batch["id"], batch["status"], time.time()
        store = self.store
        if batch.get(MODEL_KEY, self.state.loaded.info.id) != self.state.loaded.info.id:
            return  # another model's batch, in a store this server shares with its server
        if status == "validating":
            moved = await asyncio.to_thread(store.update_batch, batch_id, "in_progress",
                                            {"in_progress_at": int(now)}, expect=("validating",))
            if moved is None:
                return
            status = "in_progress"
        if status == "in_progress" and now > batch.get("expires_at", now + 1):
            await asyncio.to_thread(store.skip_pending, batch_id, now=now)
            status = "expiring"
        if status in ("cancelling", "expiring"):
            await asyncio.to_thread(store.skip_pending, batch_id, now=now)
            counts = await asyncio.to_thread(store.line_counts, batch_id)
            if counts.running == 0 and self._ours(batch_id) == 0:
                await self._finalize(owner, batch, "cancelled" if status == "cancelling" else "expired")
            return
        if status == "finalizing":
            # Left so by a runner that died writing the files: finished here once it is stale.
            if batch_id not in self._finalizing and now - batch.get("finalizing_at", now) > self.lease_s:
                await self._finalize(owner, batch, "completed", moved=True)
            return
        claims = await asyncio.to_thread(store.claim_lines, batch_id, self._spare(), now=now,
                                         lease_s=self.lease_s)
        for claim in claims:
            task = asyncio.create_task(self._run_line(owner, batch, claim))
            self._tasks[task] = claim
            task.add_done_callback(self._line_done)
        if not claims and self._ours(batch_id) == 0:
            counts = await asyncio.to_thread(store.line_counts, batch_id)
            if counts.settled:
                await self._finalize(owner, batch, "completed")

    def _line_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)
        self.wake()

    async def _run_line(self, owner: str, batch: dict[str, Any], claim: ClaimedLine) -> None:
        """Run one claimed line and store its output line (``ok``: the endpoint answered 200)."""
        line = read_line(claim.request, claim.line + 1)
        request_id = self.state.ids.new_id("batchreq-")
        started, endpoint = time.perf_counter(), batch["endpoint"]
        if self.metrics is not None:
            self.metrics.batch_lines_started.labels(endpoint).inc()
        refused = refusal(line, endpoint)
        if refused is not None and refused.code == "invalid_url":
            refused = None  # an unknown url: the 404 a live POST there gets (answer_line)
        if refused is not None:
            ok, out = False, output_line(line.custom_id, error=refused)
            answer = LineAnswer(refused.status, {}, handled={})
        else:
            assert line.url is not None and line.body is not None
            try:
                answer = await answer_line(self.state, self.store, owner, line.url, line.body, request_id)
            except OverloadedError:  # the engine filled meanwhile: the line goes back, untried
                await asyncio.to_thread(self.store.release_line, claim)
                return
            ok = answer.status == 200
            out = output_line(line.custom_id, status_code=answer.status, request_id=request_id,
                              body=answer.body)
        error = answer.body.get("error") if answer.status != 200 else None
        settings = self.state.settings
        report_line(self.metrics, line_record(
            request_id=request_id, url=line.url or endpoint, owner=owner, status=answer.status,
            started=started, handled=answer.handled, batch_id=claim.batch_id, custom_id=line.custom_id,
            error_type=error.get("type") if isinstance(error, dict) else refused and refused.type,
            log_content=settings.log_content, tokenizer=self.state.loaded.tokenizer), endpoint)
        try:
            if await asyncio.to_thread(self.store.finish_line, claim, ok, json.dumps(out)):
                self.lines_stored += 1
            else:
                log.warning("batch %s line %d: taken over by another runner; its result is kept",
                            claim.batch_id, claim.line + 1)
        except AfmError as err:  # the lease runs out and the line runs again
            log.error("batch %s line %d: result not stored: %s", claim.batch_id, claim.line + 1, err.message)

    async def _finalize(self, owner: str, batch: dict[str, Any], final: str, *, moved: bool = False) -> None:
        """Write the output and error files and give the batch its final status."""
        batch_id, store = batch["id"], self.store
        stage = batch["status"]
        if final == "completed" and not moved:
            if await asyncio.to_thread(store.update_batch, batch_id, "finalizing",
                                       {"finalizing_at": int(time.time())}, expect=("in_progress",)) is None:
                return  # another replica finalizes it
            stage = "finalizing"
        self._finalizing.add(batch_id)
        try:
            results = await asyncio.to_thread(store.line_results, batch_id)
            counts: LineCounts = await asyncio.to_thread(store.line_counts, batch_id)
            tally = request_counts(counts)
            if final == "expired":
                # As OpenAI does: each line the window left unanswered is in the error file.
                skipped = await asyncio.to_thread(store.skipped_lines, batch_id)
                results = sorted([*results, *((n, False, json.dumps(output_line(custom_id or None,
                                                                                error=batch_expired())))
                                              for n, custom_id in skipped)])
                tally["failed"] += len(skipped)
            fields: dict[str, Any] = {"request_counts": tally, f"{final}_at": int(time.time())}
            for key, ok in (("output_file_id", True), ("error_file_id", False)):
                lines = [text for _, good, text in results if good is ok]
                if lines:
                    fields[key] = await asyncio.to_thread(self._put_output, owner, batch_id, key, lines)
            ended = await asyncio.to_thread(store.update_batch, batch_id, final, fields, expect=(stage,))
            if ended is not None and self.metrics is not None:
                self.metrics.batches_ended.labels(final).inc()
            log.info("batch %s %s: %d lines, %d failed", batch_id, final, counts.total, counts.failed)
        finally:
            self._finalizing.discard(batch_id)

    def _put_output(self, owner: str, batch_id: str, key: str, lines: list[str]) -> str:
        content = "".join(line + "\n" for line in lines)
        kind = "output" if key == "output_file_id" else "error"
        stored = StoredFile(id=f"file-{secrets.token_hex(12)}", owner=owner, purpose="batch_output",
                            filename=f"{batch_id}_{kind}.jsonl", bytes=len(content.encode()),
                            created_at=int(time.time()), content=content)
        return self.store.put_file(stored).id


def batch_expired() -> InvalidRequestError:
    """The error of a line its batch's completion window ended before it ran (OpenAI's)."""
    return InvalidRequestError("This request could not be executed before the completion window expired.",
                               code="batch_expired")


def request_counts(counts: LineCounts) -> dict[str, int]:
    """The batch object's ``request_counts``: all lines, those answered 200, those that failed."""
    return {"total": counts.total, "completed": counts.succeeded, "failed": counts.failed}
