"""The Files and Batches API: ``/v1/files`` (upload, list, get, content, delete) and
``/v1/batches`` (create, get, list, cancel), in OpenAI's shapes.

Files and batches live in the app's store (``app.state.response_store``, the one that keeps
Responses) and belong to the caller's tenant: another tenant's id is a 404 like an unknown
one.  A server without a store (``--no-store``) refuses these routes with a 400 saying so.
The batches themselves run in :class:`~.runner.BatchRunner`.  Store calls block: they run off
the event loop.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from functools import partial
from typing import Any, Literal

from fastapi import APIRouter, File, Form, Request, UploadFile
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from afm_struct.errors import InvalidRequestError
from afm_struct.store.batch_records import StoredFile

from ..get_route import get_and_head
from ..schemas import ErrorEnvelope
from ..tenants import tenant_of
from .batch_lines import (
    ENDPOINTS,
    MAX_LISTED_ERRORS,
    RequestLine,
    duplicate_ids,
    listed_error,
    read_line,
    refusal,
    split_lines,
)
from .runner import MODEL_KEY, BatchRunner, request_counts

router = APIRouter()
get_route = partial(get_and_head, router)
_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorEnvelope} for status in (400, 404, 413, 503)}
# A batch's completion window: OpenAI's one value, and how long it gives.
WINDOWS = {"24h": 24 * 3600}


def _store(request: Request) -> Any:
    store = getattr(request.app.state, "response_store", None)
    if store is None:
        raise InvalidRequestError("this server keeps no store (--no-store): files and batches need one; "
                                  "start it with --responses-store PATH or a postgresql:// URL",
                                  code="store_disabled")
    return store


def _runner(request: Request) -> BatchRunner | None:
    return getattr(request.app.state, "batch_runner", None)


def _page(data: list[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None, "has_more": has_more}


def _limit(limit: int, most: int) -> int:
    if not 1 <= limit <= most:
        raise InvalidRequestError(f"limit: {limit} is out of range; give 1 to {most}", param="limit",
                                  code="invalid_value")
    return limit


# -- files ------------------------------------------------------------------------------


@router.post("/v1/files", responses=_ERRORS)
async def upload_file(request: Request, file: UploadFile = File(...),  # noqa: B008
                      purpose: str = Form(...)) -> dict[str, Any]:
    """Upload a batch input (``purpose`` ``batch``): UTF-8 JSONL, one request per line, at most
    ``--max-body-bytes`` in all; a 400 names the first line that is not UTF-8."""
    store = _store(request)
    if purpose != "batch":
        raise InvalidRequestError(f"purpose: {purpose!r}; this server keeps files for batches only: "
                                  "send purpose=batch", param="purpose", code="invalid_value")
    data = await file.read()
    split_lines(data)  # the whole file's checks: UTF-8, some line, not too many
    stored = StoredFile(id=f"file-{secrets.token_hex(12)}", owner=tenant_of(request).owner, purpose=purpose,
                        filename=file.filename or "batch.jsonl", bytes=len(data), created_at=int(time.time()),
                        content=data.decode("utf-8"))
    await asyncio.to_thread(store.put_file, stored)
    return stored.wire()


@get_route("/v1/files", responses=_ERRORS)
async def list_files(request: Request, purpose: str | None = None, after: str | None = None,
                     limit: int = 100, order: Literal["asc", "desc"] = "desc") -> dict[str, Any]:
    """The caller's files, newest first (paginated by ``after``)."""
    files, more = await asyncio.to_thread(_store(request).list_files, tenant_of(request).owner,
                                          purpose=purpose, after=after, limit=_limit(limit, 10_000),
                                          order=order)
    return _page([f.wire() for f in files], more)


@get_route("/v1/files/{file_id}", responses=_ERRORS)
async def retrieve_file(file_id: str, request: Request) -> dict[str, Any]:
    """One of the caller's files."""
    stored = await asyncio.to_thread(_store(request).get_file, tenant_of(request).owner, file_id)
    return stored.wire()


@get_route("/v1/files/{file_id}/content", responses=_ERRORS, response_class=Response)
async def file_content(file_id: str, request: Request) -> Response:
    """A file's bytes: an input as uploaded, or a batch's output or error file."""
    stored = await asyncio.to_thread(_store(request).get_file, tenant_of(request).owner, file_id,
                                     content=True)
    return Response(stored.content or "", media_type="application/jsonl")


@router.delete("/v1/files/{file_id}", responses=_ERRORS)
async def delete_file(file_id: str, request: Request) -> dict[str, Any]:
    """Delete one of the caller's files (a batch made of it keeps its own copy of the lines)."""
    await asyncio.to_thread(_store(request).delete_file, tenant_of(request).owner, file_id)
    return {"id": file_id, "object": "file", "deleted": True}


# -- batches ----------------------------------------------------------------------------


class CreateBatch(BaseModel):
    """``POST /v1/batches``."""

    model_config = ConfigDict(extra="forbid")
    input_file_id: str
    endpoint: str
    completion_window: str = "24h"
    metadata: dict[str, str] | None = Field(default=None)


async def _wire(store: Any, batch: dict[str, Any]) -> dict[str, Any]:
    """The batch object with its live ``request_counts`` (final ones once it has ended),
    without the server's own fields (``_``-prefixed)."""
    batch = {key: value for key, value in batch.items() if not key.startswith("_")}
    if batch["status"] in ("completed", "cancelled", "expired", "failed"):
        return batch
    counts = await asyncio.to_thread(store.line_counts, batch["id"])
    return {**batch, "request_counts": request_counts(counts)}


def _read_file(content: str) -> tuple[list[tuple[int, str]], list[RequestLine]]:
    """The file's non-blank lines (index, text), numbered as the uploaded file's lines (blank
    ones are skipped, not renumbered), and each read as a request."""
    texts = [(n, text) for n, text in enumerate(content.splitlines()) if text.strip()]
    return texts, [read_line(text, n + 1) for n, text in texts]


@router.post("/v1/batches", responses=_ERRORS)
async def create_batch(body: CreateBatch, request: Request) -> dict[str, Any]:
    """Make a batch of an uploaded file's lines; it runs in this server (or a replica on the
    same store) at a lower priority than live requests.  Lines that are not requests are
    listed in ``errors`` (with their line number) and answered in the error file."""
    store, owner = _store(request), tenant_of(request).owner
    if body.endpoint not in ENDPOINTS:
        raise InvalidRequestError(f"endpoint: {body.endpoint!r} is not batched here; send one of "
                                  + ", ".join(ENDPOINTS), param="endpoint", code="invalid_value")
    if body.completion_window not in WINDOWS:
        raise InvalidRequestError(f"completion_window: {body.completion_window!r}; send \"24h\"",
                                  param="completion_window", code="invalid_value")
    source = await asyncio.to_thread(store.get_file, owner, body.input_file_id, content=True)
    if source.purpose != "batch":
        raise InvalidRequestError(f"input_file_id: {body.input_file_id!r} is a {source.purpose} file; "
                                  "upload the input with purpose=batch", param="input_file_id")
    texts, lines = await asyncio.to_thread(_read_file, source.content or "")  # off the loop: up to MBs
    duplicate = duplicate_ids(lines)
    if duplicate is not None:
        raise duplicate
    bad = [listed_error(line) for line in lines if line.problem is not None]
    refused = [(line, refusal(line, body.endpoint)) for line in lines]
    # No line can run (each is not a request, or not for this endpoint): the batch fails its
    # validation as a whole, as OpenAI's does, with every line's reason in ``errors``.
    failed = all(problem is not None for _, problem in refused)
    if failed:
        bad = [listed_error(line, problem) for line, problem in refused]
    now = int(time.time())
    batch = {"id": f"batch_{secrets.token_hex(12)}", "object": "batch", "endpoint": body.endpoint,
             "errors": {"object": "list", "data": bad[:MAX_LISTED_ERRORS]} if bad else None,
             "input_file_id": body.input_file_id, "completion_window": body.completion_window,
             "status": "validating", "output_file_id": None, "error_file_id": None, "created_at": now,
             "in_progress_at": None, "expires_at": now + WINDOWS[body.completion_window],
             "finalizing_at": None, "completed_at": None, "failed_at": None, "expired_at": None,
             "cancelling_at": None, "cancelled_at": None,
             "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
             "metadata": body.metadata,
             # Run only by servers of this model: servers of other models may share the store
             # (the default SQLite file is one per user).
             MODEL_KEY: request.app.state.afm.loaded.info.id}
    if failed:  # nothing to run: no line is kept, and no output or error file is made
        batch.update(status="failed", failed_at=now, request_counts={"total": 0, "completed": 0, "failed": 0})
        await asyncio.to_thread(store.create_batch, owner, batch, [])
        metrics = getattr(request.app.state, "metrics", None)
        if metrics is not None:
            metrics.batches_ended.labels("failed").inc()
        return await _wire(store, batch)
    await asyncio.to_thread(store.create_batch, owner, batch,
                            [(n, line.custom_id or "", text)
                             for line, (n, text) in zip(lines, texts, strict=True)])
    runner = _runner(request)
    if runner is not None:
        runner.wake()
    return await _wire(store, batch)


@get_route("/v1/batches", responses=_ERRORS)
async def list_batches(request: Request, after: str | None = None, limit: int = 20) -> dict[str, Any]:
    """The caller's batches, newest first (paginated by ``after``)."""
    store = _store(request)
    batches, more = await asyncio.to_thread(store.list_batches, tenant_of(request).owner, after=after,
                                            limit=_limit(limit, 100))
    return _page([await _wire(store, b) for b in batches], more)


@get_route("/v1/batches/{batch_id}", responses=_ERRORS)
async def retrieve_batch(batch_id: str, request: Request) -> dict[str, Any]:
    """One of the caller's batches, its status and live ``request_counts``."""
    store = _store(request)
    return await _wire(store, await asyncio.to_thread(store.get_batch, tenant_of(request).owner, batch_id))


@router.post("/v1/batches/{batch_id}/cancel", responses=_ERRORS)
async def cancel_batch(batch_id: str, request: Request) -> dict[str, Any]:
    """Cancel a batch: lines not started are skipped, those running finish, and the batch ends
    ``cancelled`` with the files of the lines that ran.  An ended batch is returned unchanged."""
    store, owner = _store(request), tenant_of(request).owner
    moved = await asyncio.to_thread(store.update_batch, batch_id, "cancelling",
                                    {"cancelling_at": int(time.time())},
                                    expect=("validating", "in_progress"), owner=owner)
    runner = _runner(request)
    if runner is not None:
        runner.wake()
    batch = moved if moved is not None else await asyncio.to_thread(store.get_batch, owner, batch_id)
    return await _wire(store, batch)
