"""``POST /v1/afm/compile`` and ``POST /v1/afm/validate``: the server's own compiler and
validator, for the playground's live verdict and validity badges (and any script).

Both take a chat completions body whose ``messages`` may be left out: the output format
(``response_format``), another server's constraint field (``guided_regex``, ``guided_choice``,
``guided_grammar``, ... : server/constraint_fields.py) or ``tools`` go through exactly the path
a chat request takes (``plan_chat``, then ``prepare``: parse, checks, compile), so the verdict
is the one a request would get, 400s included (same envelope, same ``param``).  Nothing is
generated.  Compile answers (``ok: false`` and the 400's ``error`` object for a refused
constraint) the constraint mode (``X-AFM-Constraint-Mode``'s value), whether a
strict request would be downgraded, the reason, the rewrites, the backend, the compile time and
the enforcement report (``afm-struct compile``'s answer); validate judges an ``output`` (and
``tool_calls``) by the original request, as the server judges a best-effort output.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from afm_struct.errors import AfmError
from afm_struct.grammar.validation import parse_json, validate_json

from .admission import prepare
from .chat.adapter import plan_chat
from .constraint_mode import constraint_mode
from .extensions import format_enforcement
from .prepared import Prepared
from .routes import ERROR_RESPONSES
from .schemas import ChatCompletionRequest, ChatMessage
from .sse import error_body

router = APIRouter()
# A call written as text (free decoding): the outermost JSON object of the output.
_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


class CompileRequest(ChatCompletionRequest):
    """A chat completions body whose ``messages`` may be left out (one placeholder turn)."""

    messages: list[ChatMessage] = Field(  # type: ignore[assignment]
        default_factory=lambda: [ChatMessage(role="user", content="-")], min_length=1)


class ToolCallText(BaseModel):
    """One call to validate: its name and its arguments' JSON text."""

    name: str
    arguments: str


class ValidateRequest(CompileRequest):
    """What to judge: ``output`` (the content) and the ``tool_calls`` made, if any."""

    output: str = ""
    tool_calls: list[ToolCallText] | None = None


async def _prepared(request: Request, body: ChatCompletionRequest) -> Prepared:
    state = request.app.state.afm
    plan = await plan_chat(state, body, request_id=request.state.request_id, profile_key=None)
    return await prepare(state, plan)


@router.post("/v1/afm/compile", responses=ERROR_RESPONSES)
async def compile_constraint(body: CompileRequest, request: Request) -> JSONResponse:
    """Compile the request's constraint as a chat request would; answer mode and report.

    A constraint the request path refuses is a verdict, not a failure of this call: 200 with
    ``ok: false`` and the ``error`` object the chat request would get in its 400 (a body this
    route cannot read at all is still a 400).  A page typing a schema then logs no failed
    request per keystroke."""
    started = time.perf_counter()
    try:
        prepared = await _prepared(request, body)
    except AfmError as err:
        if err.status != 400:
            raise
        return JSONResponse({"object": "afm.compile", "ok": False, "error": error_body(err)})
    return JSONResponse(compile_body(prepared, (time.perf_counter() - started) * 1000))


def compile_body(prepared: Prepared, elapsed_ms: float) -> dict[str, Any]:
    """The compile verdict of a prepared request (pure: tested without a server)."""
    structured, tools = prepared.structured, prepared.tools
    compiled = structured.compiled
    mode = constraint_mode(structured, tools)
    return {
        "object": "afm.compile",
        "ok": True,
        "kind": getattr(compiled, "kind", None) or ("tools" if tools is not None else None),
        "mode": mode.value if mode is not None else None,
        "downgraded": prepared.downgraded,
        "reason": structured.reason,
        "rewrites": list(getattr(compiled, "rewrites", ())),
        "backend": getattr(compiled, "backend", None),
        "compile_ms": round(getattr(compiled, "compile_ms", 0.0), 3),
        "cached": getattr(compiled, "cached", None),
        "tools": {**tools.rungs, **tools.guided} if tools is not None else None,
        "enforcement": format_enforcement(structured),
        "elapsed_ms": round(elapsed_ms, 3),
    }


@router.post("/v1/afm/validate", responses=ERROR_RESPONSES)
async def validate_output(body: ValidateRequest, request: Request) -> JSONResponse:
    """Judge ``output`` / ``tool_calls`` by the request's original constraint."""
    prepared = await _prepared(request, body)
    calls = [(c.name, c.arguments) for c in body.tool_calls] if body.tool_calls is not None else None
    return JSONResponse(validation_body(prepared, body.output, calls))


def validation_body(prepared: Prepared, output: str, calls: list[tuple[str, str]] | None) -> dict[str, Any]:
    """``{object, kind, parsed, valid, errors}`` for ``output`` and ``calls`` (pure).

    A tools request is judged by its calls: each must name a tool and its arguments validate
    against the tool's parameters; without ``tool_calls`` the output itself is read as a call
    (``{"name": ..., "arguments": {...}}``, what free decoding writes when asked to).  No
    constraint at all: valid, nothing to judge (``kind`` null)."""
    tools = prepared.tools
    if tools is not None and (calls or prepared.structured.compiled is None):
        return _calls_verdict(tools.tools, calls if calls is not None else _call_in_text(output))
    compiled = prepared.structured.compiled
    if compiled is None or not hasattr(compiled, "validate"):
        return {"object": "afm.validation", "kind": None, "parsed": True, "valid": True, "errors": []}
    outcome = compiled.validate(output)
    json_kind = compiled.kind in ("json_schema", "json_object", "tool_call")
    parsed = parse_json(output)[1] is None if json_kind else outcome.ok
    return {"object": "afm.validation", "kind": compiled.kind, "parsed": parsed, "valid": outcome.ok,
            "errors": list(outcome.errors)}


def _call_in_text(output: str) -> list[tuple[str, str]]:
    """The call a free output wrote as a JSON object (none found: one call without a name)."""
    found = _OBJECT.search(output)
    value, err = parse_json(found.group(0)) if found else (None, "no JSON object")
    if err is not None or not isinstance(value, dict):
        return [("", output)]
    args = value.get("arguments", value.get("parameters", {}))
    return [(str(value.get("name", "")), args if isinstance(args, str) else json.dumps(args))]


def _calls_verdict(tool_defs: Any, calls: list[tuple[str, str]]) -> dict[str, Any]:
    by_name = {t.name: t for t in tool_defs}
    errors: list[str] = []
    parsed = bool(calls)
    if not calls:
        errors.append("no tool call was made")
    for i, (name, arguments) in enumerate(calls):
        tool = by_name.get(name)
        if tool is None:
            errors.append(f"tool_calls[{i}]: no tool named {name!r}")
            parsed = parsed and parse_json(arguments)[1] is None
            continue
        outcome = validate_json(arguments, tool.parameters)
        parsed = parsed and parse_json(arguments)[1] is None
        errors.extend(f"tool_calls[{i}] ({name}): {e}" for e in outcome.errors)
    return {"object": "afm.validation", "kind": "tools", "parsed": parsed, "valid": not errors,
            "errors": errors}
