"""Tool calls: formats (``grammars/``), prompts, grammars, parsing and streamed deltas.

    plan = plan_tools(tokenizer, body_tools, tool_choice, parallel_tool_calls, messages=messages)
    prompt_ids = plan.encode_prompt(tokenizer)
    GenerationRequest(prompt_ids, params, constraint=plan.constraint, reasoning=tags)
    router = plan.make_router(reasoning_tags=..., start_in_reasoning=...)   # feed/finish/finish_reason
"""

from __future__ import annotations

from .definitions import Choice, ToolDef, parse_choice, parse_tools
from .formats import FormatTable, ToolFormat, detect_format, load_table
from .parser import ArgsEvent, CallEnd, CallParser, CallStart, TextEvent
from .plan import ToolPlan, plan_tools
from .stream import ReasoningSplitter, ToolCallRouter, new_call_id

__all__ = [
    "ArgsEvent",
    "CallEnd",
    "CallParser",
    "CallStart",
    "Choice",
    "FormatTable",
    "ReasoningSplitter",
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
