"""``structural_tag`` in both forms on every door, on the real embedded model (SmolLM2-135M):
each request's output, whether every tagged body validates against its schema, and the
``X-AFM-Constraint-Mode`` header.  A raw-prompt door (/v1/completions) is primed with the call
syntax; the chat doors ask in words, so the model may or may not call: a third format (a
``sequence`` whose first element is the tag) makes every door write one.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/structural_tag/doors.py

Results: README.md beside this file.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import jsonschema

from afm_struct.models import load_model
from server.live import start_server

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                             "days": {"type": "integer", "minimum": 1, "maximum": 7}},
           "required": ["city", "days"], "additionalProperties": False}
VLLM = {"type": "structural_tag", "triggers": ["<fn="],
        "structures": [{"begin": "<fn=weather>", "schema": WEATHER, "end": "</fn>"}]}
XGRAMMAR = {"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": ["<fn="], "tags": [
    {"type": "tag", "begin": "<fn=weather>", "end": "</fn>",
     "content": {"type": "json_schema", "json_schema": WEATHER}}]}}
# A call first, then free text: the chat doors' model does not call by itself.
FIRST = {"type": "structural_tag", "format": {"type": "sequence", "elements": [
    XGRAMMAR["format"]["tags"][0], {"type": "any_text"}]}}
ASK = "Call <fn=weather>{\"city\": ..., \"days\": ...}</fn> to get the weather. Weather in Rome for 3 days?"
PRIMED = ('Tool: <fn=weather>{"city": "Paris", "days": 2}</fn> gives the weather.\n'
          "User: weather in Rome for 3 days?\nAssistant: Sure, calling it now:")
CALL = re.compile(r"<fn=weather>(.*?)</fn>", re.DOTALL)


def bodies_valid(text: str) -> tuple[int, bool]:
    """(calls written, every body valid) of an output."""
    found = CALL.findall(text)
    try:
        for body in found:
            jsonschema.validate(json.loads(body), WEATHER)
    except (ValueError, jsonschema.ValidationError):
        return len(found), False
    return len(found), text.count("<fn=") == len(found)


def main() -> None:
    live = start_server(load_model())
    try:
        chat = {"messages": [{"role": "user", "content": ASK}], "max_tokens": 48, "temperature": 0}
        raw = {"prompt": PRIMED, "max_tokens": 48, "temperature": 0}
        cases: list[tuple[str, str, dict[str, Any], Any]] = []
        for name, form in (("vllm", VLLM), ("xgrammar", XGRAMMAR), ("xgrammar, call first", FIRST)):
            cases += [
                (f"chat response_format ({name})", "/v1/chat/completions", {**chat, "response_format": form},
                 lambda r: r["choices"][0]["message"]["content"]),
                (f"completions response_format ({name})", "/v1/completions", {**raw, "response_format": form},
                 lambda r: r["choices"][0]["text"]),
                (f"responses text.format ({name})", "/v1/responses",
                 {"input": ASK, "max_output_tokens": 48, "temperature": 0, "text": {"format": form}},
                 lambda r: "".join(c["text"] for item in r["output"] if item["type"] == "message"
                                   for c in item["content"])),
                (f"chat structured_outputs.structural_tag ({name})", "/v1/chat/completions",
                 {**chat, "structured_outputs": {"structural_tag": json.dumps(form)}},
                 lambda r: r["choices"][0]["message"]["content"]),
                (f"completions structured_outputs.structural_tag ({name})", "/v1/completions",
                 {**raw, "structured_outputs": {"structural_tag": form}}, lambda r: r["choices"][0]["text"]),
            ]
        for name, path, body, text_of in cases:
            response = httpx.post(f"{live.url}{path}", json=body, timeout=300)
            text = text_of(response.json()) if response.status_code == 200 else response.text
            calls, valid = bodies_valid(text)
            print(f"| {name} | {response.status_code} | {response.headers.get('x-afm-constraint-mode')} | "
                  f"{calls} | {'yes' if valid else 'NO'} | `{text!r}` |")
    finally:
        live.stop()


if __name__ == "__main__":
    main()
