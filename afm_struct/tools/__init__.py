"""Tool calls: formats (``grammars/``), prompts, grammars, parsing and streamed deltas.

Server wiring (one request)::

    plan = await asyncio.to_thread(plan_tools, tokenizer, body.tools, body.tool_choice,
                                   body.parallel_tool_calls, messages=template_messages(body.messages),
                                   compile_fn=state.compile_fn)
    prompt_ids = await asyncio.to_thread(plan.encode_prompt, tokenizer)   # plan.messages/template_tools
    tags = reasoning_tags(state, prompt_ids)
    GenerationRequest(prompt_ids, params, constraint=plan.constraint,
                      reasoning=tags if plan.constraint is not None else None)
    router = plan.make_router(reasoning_tags=(tags.open, tags.close) if tags else None,
                              start_in_reasoning=bool(tags and tags.opened_in_prompt))
    # router.feed / finish / finish_reason as any DeltaRouter; stream its deltas as they come
    if plan.downgraded: headers["X-Grammar-Constraints"] = "downgraded"
"""

from __future__ import annotations

from .definitions import Choice, ToolDef, parse_choice, parse_tools
from .formats import FormatTable, ToolFormat, detect_format, load_table
from .parser import ArgsEvent, CallEnd, CallParser, CallStart, TextEvent
from .plan import ToolPlan, plan_tools
from .stream import ToolCallRouter, new_call_id

__all__ = [
    "ArgsEvent",
    "CallEnd",
    "CallParser",
    "CallStart",
    "Choice",
    "FormatTable",
    "TextEvent",
    "ToolCallRouter",
    "ToolDef",
    "ToolFormat",
    "ToolPlan",
    "detect_format",
    "load_table",
    "new_call_id",
    "parse_choice",
    "parse_tools",
    "plan_tools",
]
