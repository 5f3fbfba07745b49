"""Tool calls: definitions, formats (``grammars/``), prompts, grammars, parsing and streamed events.

Server wiring (one request; ``server/admission.py`` and ``server/run.py``)::

    tools = check_tools(specs)            # a protocol adapter's ToolSpecs (parse_tools: chat's shape)
    choice = check_choice(Choice("required"), tools)
    plan = plan_tools(tokenizer, tools, choice, parallel, messages=messages, compile_grammar=False)
    prompt_ids = plan.encode_prompt(tokenizer)           # plan.messages / template_tools
    plan = plan.constrained(tokenizer)                   # the tool grammar, once the prompt fits
    turn = plan.make_router(reasoning_tags=..., id_factory=...)   # the request's one Turn
    GenerationRequest(prompt_ids, params, constraint=plan.constraint, reasoning=..., turn=turn)
    # the generator feeds the turn and its gate reads turn.phase (think/content/call/done); its
    # Text, Reasoning, CallOpened, CallArguments, CallClosed events (afm_struct.turn.events)
    # ride the TextDeltas (Finished.events at the end); turn.finish_reason gives tool_calls
    if plan.downgraded: headers["X-Grammar-Constraints"] = "downgraded"
"""

from __future__ import annotations

from .call_stream import ToolCallRouter, new_call_id
from .definitions import Choice, ToolDef, ToolSpec, check_choice, check_tools, parse_choice, parse_tools
from .formats import FormatTable, ToolFormat, detect_format, load_table
from .parser import ArgsEvent, CallEnd, CallParser, CallStart, TextEvent
from .plan import ToolPlan, plan_tools

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
    "ToolSpec",
    "check_choice",
    "check_tools",
    "detect_format",
    "load_table",
    "new_call_id",
    "parse_choice",
    "parse_tools",
    "plan_tools",
]
