"""Bounds on the strings a Responses request makes the server keep (in the response object, and
in the store when ``store`` is on).

Text that reaches the prompt (messages, ``instructions``, call arguments and outputs, custom
tool inputs) is bounded by the model's context: a prompt over it is refused before anything is
stored.  Everything else a request sends is echoed and stored without reaching the model, so
each such string has its own bound here, checked before the request runs, a 400 naming the
field (``code: "string_above_max_length"``, OpenAI's); and the keys an input item or content
part may carry are the ones OpenAI's items have, so no unknown key rides along into the store.
``metadata`` keeps its own bounds (:func:`.adapter.check_metadata`).  docs/protocol.md lists
them all.
"""

from __future__ import annotations

import json
from typing import Any

from afm_struct.errors import InvalidRequestError

# OpenAI documents a maxLength of 64 for safety_identifier; user and prompt_cache_key have no
# documented bound there, so they get room for any hash or session id.
MAX_SAFETY_IDENTIFIER = 64
MAX_USER = 256
MAX_PROMPT_CACHE_KEY = 256
# Ids: previous_response_id, an input item's id and call_id.  OpenAI's are under 100
# characters; this server's are 24-30.
MAX_ID = 256
# A passed-back item's status (in_progress, completed, incomplete, ...).
MAX_STATUS = 32
# OpenAI's bound on function names ("a maximum length of 64").
MAX_TOOL_NAME = 64
# Descriptions: a tool's (rendered into the prompt only when tools are offered: with
# tool_choice "none" it is only echoed and stored), text.format.description (never rendered).
MAX_DESCRIPTION = 16_384
# A passed-back reasoning item's summary parts, all together (read by nothing here).
MAX_SUMMARY = 16_384
# The model output a request passes back that the prompt may not hold: the reasoning text of
# reasoning items, the arguments of function calls and the input of custom tool calls.  A
# chat template may drop them (SmolLM2's drops calls and reasoning, Qwen3's drops the
# reasoning of earlier turns), so the context need not bound them; a long agent loop's fit
# (a million characters is ~250k tokens).
MAX_PASSED_BACK_OUTPUT = 1 << 20
# The annotations and logprobs of passed-back output_text parts, as compact JSON, all together
# (never rendered).  An answer of 1,000 tokens with 20 alternatives each passes back whole.
MAX_PART_EXTRAS_BYTES = 1 << 20
# The definitions a response echoes whole, as compact JSON: all ``tools`` together (with
# tool_choice "none" they never reach the prompt; else the context bounds them too), and
# ``text.format`` (its schema constrains the output and is never rendered).  A set of 128
# tools of 4 KB each fits; a megabyte-sized enum does not.
MAX_TOOLS_BYTES = 1 << 20
MAX_FORMAT_BYTES = 512 << 10

# The keys each input item type may carry ("message" also without its type).
ITEM_KEYS: dict[str, frozenset[str]] = {
    "message": frozenset({"type", "role", "content", "id", "status"}),
    "function_call": frozenset({"type", "id", "call_id", "name", "arguments", "status"}),
    "function_call_output": frozenset({"type", "id", "call_id", "output", "status"}),
    "custom_tool_call": frozenset({"type", "id", "call_id", "name", "input", "status"}),
    "custom_tool_call_output": frozenset({"type", "id", "call_id", "output", "status"}),
    "reasoning": frozenset({"type", "id", "summary", "content", "encrypted_content", "status"}),
}
# The keys of each content part type (annotations and logprobs are passed back as this
# server's own output carries them).
PART_KEYS: dict[str, frozenset[str]] = {
    "input_text": frozenset({"type", "text"}),
    "output_text": frozenset({"type", "text", "annotations", "logprobs"}),
    "refusal": frozenset({"type", "refusal"}),
    "reasoning_text": frozenset({"type", "text"}),
    "summary_text": frozenset({"type", "text"}),
}


def too_long(param: str, length: int, limit: int) -> InvalidRequestError:
    """The 400 for a string of ``length`` characters at ``param``, over ``limit``."""
    return InvalidRequestError(f"{param} is {length:,} characters long; at most {limit:,} are accepted",
                               param=param, code="string_above_max_length")


def check_string(value: Any, limit: int, param: str) -> None:
    """400 when ``value`` (None passes) is not a string of at most ``limit`` characters."""
    if value is None:
        return
    if not isinstance(value, str):
        raise InvalidRequestError(f"{param} must be a string", param=param, code="invalid_type")
    if len(value) > limit:
        raise too_long(param, len(value), limit)


def check_keys(value: dict[str, Any], allowed: frozenset[str], where: str, what: str) -> None:
    """400 naming the first key of ``value`` not in ``allowed`` (``where.key``)."""
    for key in value:
        if key not in allowed:
            raise InvalidRequestError(f"unknown parameter {where}.{key} for {what}",
                                      param=f"{where}.{key}", code="unknown_parameter")


def json_size(value: Any) -> int:
    """``value``'s size as compact JSON, in UTF-8 bytes (as the store keeps it)."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def check_request_fields(body: Any) -> None:
    """The top-level fields a Responses request echoes whole: the strings ``user``,
    ``safety_identifier``, ``prompt_cache_key``, ``previous_response_id``,
    ``text.format.description``, and the sizes of ``tools`` and ``text.format``."""
    check_string(body.safety_identifier, MAX_SAFETY_IDENTIFIER, "safety_identifier")
    check_string(body.user, MAX_USER, "user")
    check_string(body.prompt_cache_key, MAX_PROMPT_CACHE_KEY, "prompt_cache_key")
    check_string(body.previous_response_id, MAX_ID, "previous_response_id")
    fmt = body.text.format if body.text is not None else None
    if isinstance(fmt, dict):
        check_string(fmt.get("description"), MAX_DESCRIPTION, "text.format.description")
        size = json_size(fmt)
        if size > MAX_FORMAT_BYTES:
            raise InvalidRequestError(f"text.format is {size:,} bytes as JSON; at most {MAX_FORMAT_BYTES:,} "
                                      "are accepted", param="text.format", code="request_too_large")
    if body.tools:
        for i, tool in enumerate(body.tools):
            if isinstance(tool, dict):
                check_string(tool.get("name"), MAX_TOOL_NAME, f"tools.{i}.name")
                check_string(tool.get("description"), MAX_DESCRIPTION, f"tools.{i}.description")
        size = json_size(body.tools)
        if size > MAX_TOOLS_BYTES:
            raise InvalidRequestError(f"tools are {size:,} bytes as JSON together; at most "
                                      f"{MAX_TOOLS_BYTES:,} are accepted", param="tools",
                                      code="request_too_large")


def _passed_back_output(item: dict[str, Any], i: int) -> list[tuple[str, str]]:
    """(param, text) of the model output an input item passes back (see
    :data:`MAX_PASSED_BACK_OUTPUT`)."""
    kind = item.get("type")
    if kind == "function_call" and isinstance(item.get("arguments"), str):
        return [(f"input.{i}.arguments", item["arguments"])]
    if kind == "custom_tool_call" and isinstance(item.get("input"), str):
        return [(f"input.{i}.input", item["input"])]
    if kind == "reasoning" and isinstance(item.get("content"), list):
        return [(f"input.{i}.content.{j}.text", part["text"]) for j, part in enumerate(item["content"])
                if isinstance(part, dict) and isinstance(part.get("text"), str)]
    return []


def check_input_totals(items: Any) -> None:
    """The request's ``input`` as a whole: the model output it passes back (reasoning text,
    call arguments, custom tool inputs: at most :data:`MAX_PASSED_BACK_OUTPUT` characters
    together; 400 ``string_above_max_length`` at the field where it passes), and the
    annotations and logprobs of its output_text parts (at most :data:`MAX_PART_EXTRAS_BYTES`
    together; 400 ``request_too_large``).  Malformed items are left to the item checks."""
    if not isinstance(items, list):
        return
    output = extras = 0
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        for param, text in _passed_back_output(item, i):
            output += len(text)
            if output > MAX_PASSED_BACK_OUTPUT:
                raise InvalidRequestError(
                    f"the reasoning text, call arguments and custom tool inputs passed back up to {param} "
                    f"are {output:,} characters; at most {MAX_PASSED_BACK_OUTPUT:,} are accepted together",
                    param=param, code="string_above_max_length")
        parts = item.get("content")
        for j, part in enumerate(parts if isinstance(parts, list) else ()):
            for key in ("annotations", "logprobs"):
                if isinstance(part, dict) and part.get(key):
                    extras += json_size(part[key])
                    if extras > MAX_PART_EXTRAS_BYTES:
                        raise InvalidRequestError(
                            f"the annotations and logprobs passed back up to input.{i}.content.{j} are "
                            f"{extras:,} bytes as JSON; at most {MAX_PART_EXTRAS_BYTES:,} are accepted "
                            "together (drop them from the items passed back: they are not read)",
                            param=f"input.{i}.content.{j}.{key}", code="request_too_large")


def check_item(item: dict[str, Any], kind: str, where: str) -> None:
    """An input item's keys and the strings it carries that no prompt bounds."""
    check_keys(item, ITEM_KEYS[kind], where, f"a {kind} item")
    if kind in ("function_call", "custom_tool_call"):
        check_string(item.get("name"), MAX_TOOL_NAME, f"{where}.name")
    for key in ("id", "call_id"):
        check_string(item.get(key), MAX_ID, f"{where}.{key}")
    check_string(item.get("status"), MAX_STATUS, f"{where}.status")
    if kind == "reasoning":
        summary = item.get("summary")
        if summary is None:
            return
        if not isinstance(summary, list):
            raise InvalidRequestError(f"{where}.summary must be a list of summary_text parts",
                                      param=f"{where}.summary")
        total = 0
        for j, part in enumerate(summary):
            at = f"{where}.summary.{j}"
            if not isinstance(part, dict) or part.get("type") != "summary_text":
                raise InvalidRequestError(f"{at} must be a summary_text part", param=at)
            check_part(part, "summary_text", at)
            check_string(part.get("text"), MAX_SUMMARY, f"{at}.text")
            total += len(part.get("text") or "")
            if total > MAX_SUMMARY:
                raise too_long(f"{where}.summary", total, MAX_SUMMARY)


def check_part(part: dict[str, Any], kind: str, where: str) -> None:
    """A content part's keys (its text is the prompt's; annotations and logprobs must be lists)."""
    check_keys(part, PART_KEYS[kind], where, f"an {kind} part" if kind[0] in "aeiou" else f"a {kind} part")
    for key in ("annotations", "logprobs"):
        if key in part and not isinstance(part[key], list):
            raise InvalidRequestError(f"{where}.{key} must be a list", param=f"{where}.{key}")
