"""How much one request can make the response store keep (issue 46, finding 4).

Serves the scripted model in this process with a fresh SQLite store (``--store-quota-*`` off),
sends hostile requests that put ~7 MB into one field each (a field that never reaches the
prompt: user, safety_identifier, prompt_cache_key, a tool description with tool_choice none,
an input item's id, an unknown key of an item, text.format.description, a reasoning summary,
reasoning text and call arguments the template drops, a tool_choice key), then the largest request every bound
lets through (each field at its bound), and prints per request its status, the bytes the
store file grew by, and the size of its GET.
Run from a checkout (PYTHONPATH picks which code is measured)::

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 PYTHONPATH=. \
      .venv/bin/python benchmarks/store/store_growth.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

BIG = 7_000_000
SCHEMA = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"],
          "additionalProperties": False}


def hostile() -> list[tuple[str, dict[str, Any]]]:
    """One request per field, ~7 MB in it (under the 8 MB body limit)."""
    x = "x" * BIG
    tool = {"type": "function", "name": "f", "parameters": SCHEMA}
    return [
        ("user", {"input": "hi", "user": x}),
        ("safety_identifier", {"input": "hi", "safety_identifier": x}),
        ("prompt_cache_key", {"input": "hi", "prompt_cache_key": x}),
        ("tools.0.description (tool_choice none)",
         {"input": "hi", "tools": [{**tool, "description": x}], "tool_choice": "none"}),
        ("input.0.id", {"input": [{"role": "user", "content": "hi", "id": x}]}),
        ("input.0.junk", {"input": [{"role": "user", "content": "hi", "junk": x}]}),
        ("text.format.description", {"input": "hi", "text": {"format": {
            "type": "json_schema", "name": "n", "schema": SCHEMA, "description": x}}}),
        ("input.1.summary", {"input": [{"role": "user", "content": "hi"}, {
            "type": "reasoning", "summary": [{"type": "summary_text", "text": x}]}]}),
        ("input.1.content (reasoning text)", {"input": [
            {"role": "user", "content": "hi"},
            {"type": "reasoning", "content": [{"type": "reasoning_text", "text": x}]},
            {"role": "assistant", "content": "a"}, {"role": "user", "content": "hi"}]}),
        ("input.1.arguments (function call)", {"input": [
            {"role": "user", "content": "hi"},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": x},
            {"type": "function_call_output", "call_id": "c", "output": "ok"}]}),
        ("tool_choice.junk", {"input": "hi", "tools": [tool],
                              "tool_choice": {"type": "function", "name": "f", "junk": x}}),
    ]


def at_the_bounds() -> dict[str, Any]:
    """The largest request the bounds let through without reaching the prompt (bounds of this
    checkout's server.responses.bounds; nothing when it has none)."""
    try:
        from server.responses import bounds as b
    except ImportError:
        return {}
    tools = [{"type": "function", "name": f"f{n:03d}", "parameters": SCHEMA, "description": ""}
             for n in range(128)]
    room = (b.MAX_TOOLS_BYTES - b.json_size(tools)) // len(tools)
    tools = [{**tool, "description": "d" * min(room, b.MAX_DESCRIPTION)} for tool in tools]
    return {
        "input": [{"role": "user", "content": "hi", "id": "i" * b.MAX_ID, "status": "s" * b.MAX_STATUS},
                  {"type": "reasoning", "id": "r" * b.MAX_ID,
                   "summary": [{"type": "summary_text", "text": "s" * b.MAX_SUMMARY}],
                   "content": [{"type": "reasoning_text", "text": "t" * b.MAX_PASSED_BACK_OUTPUT}]},
                  {"role": "assistant", "content": "a"}, {"role": "user", "content": "hi"}],
        "user": "u" * b.MAX_USER, "safety_identifier": "s" * b.MAX_SAFETY_IDENTIFIER,
        "prompt_cache_key": "p" * b.MAX_PROMPT_CACHE_KEY,
        "metadata": {f"k{n:02d}" + "k" * 60: "v" * 512 for n in range(16)},
        "tools": tools, "tool_choice": "none",
        "text": {"format": {"type": "json_schema", "name": "n", "description": "d" * b.MAX_DESCRIPTION,
                            "schema": {**SCHEMA, "description": "s" * (b.MAX_FORMAT_BYTES
                                                                       - 2 * b.MAX_DESCRIPTION)}}},
    }


def main() -> int:
    from afm_struct.models import load_tokenizer
    from afm_struct.store import open_store
    from afm_struct.testing import scripted_loaded_model
    from server.live import start_server
    from server.settings import ServerSettings

    settings: dict[str, Any] = {}
    if "store_quota_bytes" in ServerSettings.__dataclass_fields__:
        settings = {"store_quota_bytes": 0, "store_quota_responses": 0}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "r.sqlite3"
        live = start_server(scripted_loaded_model(load_tokenizer(), "Hello there"),
                            ServerSettings(**settings), response_store=open_store(path))

        def size() -> int:
            return sum(p.stat().st_size for p in Path(tmp).iterdir())

        try:
            cases = hostile()
            bounded = at_the_bounds()
            if bounded:
                cases.append(("every field at its bound", bounded))
            total = 0
            print(f"{'request':42} {'status':>6} {'store grew (B)':>15} {'GET (B)':>10}")
            for name, body in cases:
                before = size()
                r = httpx.post(f"{live.url}/v1/responses", json=body, timeout=120)
                get = 0
                if r.status_code == 200:
                    get = len(httpx.get(f"{live.url}/v1/responses/{r.json()['id']}", timeout=60).content)
                grew = size() - before
                total += grew
                print(f"{name:42} {r.status_code:>6} {grew:>15,} {get:>10,}")
                if r.status_code != 200:
                    print(f"{'':42} {r.json()['error'].get('param')}: {r.json()['error']['message'][:60]}")
            print(f"{'total':42} {'':>6} {total:>15,}")
        finally:
            live.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
