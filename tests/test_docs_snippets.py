"""Every Python block in README.md and docs/*.md runs as written.

The blocks of a page run top to bottom in one fresh interpreter (a page may define ``City``
once and use it below), as a reader pasting the page would.  Pages that talk to a server
(``http://127.0.0.1:9999``) get a live server on the scripted model instead, at an ephemeral
port substituted for that address (and in ``OPENAI_BASE_URL``), with a response store as
``make serve`` has (``previous_response_id`` works); the scripted model answers
each request with a valid instance of what was asked (the tool call or the schema), so
client libraries take the same paths as against the real model.  Pages that load the real
model (``load_model()``, ``extract()`` without ``model=``) run it and are marked ``model``.

A block preceded by ``<!-- docs-test: skip: REASON -->`` is not run; REASON must say why.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from afm_struct.grammar.spec import JsonSchemaRequest
from afm_struct.models.tokenizer import Tokenizer
from afm_struct.store import open_store
from afm_struct.testing import Script, scripted_loaded_model
from server.live import start_server
from server.settings import ServerSettings
from server.structured import default_compiler

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
DOCS_URL = "http://127.0.0.1:9999"
DOCS_MODEL = "SmolLM2-135M-Instruct"
_SKIP = re.compile(r"<!--\s*docs-test:\s*skip:\s*(\S.*?)\s*-->")
_REAL_MODEL = re.compile(r"load_model\(\)|\bextract\((?![^)]*\bmodel=)")


@dataclass(frozen=True)
class Block:
    """One fenced Python block: where it starts (the line after the fence) and its code."""

    path: Path
    line: int
    code: str


def python_blocks(path: Path) -> tuple[list[Block], list[tuple[int, str]]]:
    """The page's Python blocks to run, and (line, reason) of those marked not to run."""
    blocks: list[Block] = []
    skipped: list[tuple[int, str]] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() in ("```python", "```py"):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            before = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
            marker = _SKIP.search(before)
            if marker:
                skipped.append((i + 1, marker.group(1)))
            else:
                blocks.append(Block(path, i + 2, "\n".join(lines[i + 1:end])))
            i = end
        i += 1
    return blocks, skipped


def _pages() -> Iterator[Any]:
    for path in PAGES:
        blocks, _ = python_blocks(path)
        if blocks:
            real = any(_REAL_MODEL.search(b.code) for b in blocks)
            yield pytest.param(path, id=str(path.relative_to(ROOT)),
                               marks=[pytest.mark.model] if real else [])


# -- the scripted model's answers ------------------------------------------------------------------

_STRINGS = {"city": "Paris", "name": "Paris", "country": "France"}


def instance(schema: Any, root: dict[str, Any], key: str = "") -> Any:
    """A small valid instance of ``schema`` (local ``$ref``s resolved against ``root``)."""
    if not isinstance(schema, dict):
        return {}
    if "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            target = target[part]
        return instance(target, root, key)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    for combinator in ("anyOf", "oneOf"):
        if combinator in schema:
            branches = [b for b in schema[combinator] if b.get("type") != "null"] or schema[combinator]
            return instance(branches[0], root, key)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next(k for k in kind if k != "null")
    if kind == "object":
        return {k: instance(v, root, k) for k, v in (schema.get("properties") or {}).items()}
    if kind == "array":
        return [instance(schema.get("items", {}), root, key)] * max(1, schema.get("minItems", 1))
    scalars = {"integer": 1, "number": 1.5, "boolean": True, "null": None}
    return scalars.get(kind, _STRINGS.get(key.lower(), "Paris"))


class DocsAssistant:
    """What the scripted model says: a call to the first tool the prompt lists (once a tool
    result is in the prompt and the request has an output format: an instance of it, so an
    agent loop with tools and an output type ends), else an instance of the last
    ``response_format`` schema compiled, else a greeting."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.schema: Any = None
        self.format_schema: Any = None  # the last output format's (not a tool's arguments)
        self._compile = default_compiler()

    def compile(self, tokenizer: Any, request: Any) -> Any:
        """The server's compile hook: remember the schema asked for, then compile as usual."""
        if isinstance(request, JsonSchemaRequest):
            self.schema = request.schema
            if request.param != "tools":
                self.format_schema = request.schema
        return self._compile(tokenizer, request)

    def __call__(self, prompt_ids: list[int]) -> str:
        prompt = self.tokenizer.decode(prompt_ids)
        answer = self.format_schema
        if "<tools>\n" in prompt and "<tool_response>" in prompt and isinstance(answer, dict):
            return json.dumps(instance(answer, answer))
        if "<tools>\n" in prompt:
            listed = prompt.rsplit("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
            tool = json.loads(listed.splitlines()[0])
            params = tool.get("parameters") or {}
            call = {"name": tool["name"], "arguments": instance(params, params)}
            return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
        if isinstance(self.schema, dict):
            return json.dumps(instance(self.schema, self.schema))
        return "Hello there, world!"


# -- running a page ---------------------------------------------------------------------------------

RUNNER = r"""
import json, sys, traceback
namespace = {"__name__": "__main__"}
for block in json.load(open(sys.argv[1])):
    where = f"{block['path']}:{block['line']}"
    print(f"--- {where}", flush=True)
    try:
        exec(compile("\n" * (block["line"] - 1) + block["code"], block["path"], "exec"), namespace)
    except BaseException:
        traceback.print_exc()
        sys.exit(f"the block at {where} failed")
"""


def run_page(blocks: list[Block], tmp_path: Path, url: str | None) -> subprocess.CompletedProcess[str]:
    """Run ``blocks`` in order in one new interpreter, pointed at ``url`` when given."""
    payload = [{"path": str(b.path), "line": b.line,
                "code": b.code.replace(DOCS_URL, url) if url else b.code} for b in blocks]
    (tmp_path / "blocks.json").write_text(json.dumps(payload))
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRANSFORMERS_NO_ADVISORY_WARNINGS="1")
    if url:
        env.update(OPENAI_BASE_URL=f"{url}/v1", OPENAI_API_KEY="unused")
    return subprocess.run([sys.executable, "-c", RUNNER, str(tmp_path / "blocks.json")], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=280)


@pytest.mark.parametrize("page", list(_pages()))
def test_every_python_block_runs(page: Path, tokenizer: Tokenizer, tmp_path: Path) -> None:
    blocks, skipped = python_blocks(page)
    assert all(reason.strip() for _, reason in skipped)
    live = None
    if any(DOCS_URL in b.code for b in blocks):
        assistant = DocsAssistant(tokenizer)
        live = start_server(scripted_loaded_model(tokenizer, Script(assistant)),
                            ServerSettings(served_model_names=(DOCS_MODEL,)), compile_fn=assistant.compile,
                            response_store=open_store(tmp_path / "responses.sqlite3"))
    try:
        done = run_page(blocks, tmp_path, live.url if live else None)
    finally:
        if live is not None:
            live.stop()
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    assert done.stdout.count("--- ") == len(blocks)


def test_blocks_are_found_and_skips_need_a_reason(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("text\n```python\nx = 1\n```\n<!-- docs-test: skip: needs a GPU -->\n\n```python\n"
                    "y = 2\n```\n```sh\nls\n```\n```py\nz = x\n```\n")
    blocks, skipped = python_blocks(page)
    assert [(b.line, b.code) for b in blocks] == [(3, "x = 1"), (14, "z = x")]
    assert skipped == [(7, "needs a GPU")]
    assert any(DOCS_URL in b.code for p in PAGES for b in python_blocks(p)[0])  # a server page exists


def test_the_assistant_answers_with_instances() -> None:
    schema = {"type": "object", "$defs": {"U": {"enum": ["c", "f"]}},
              "properties": {"city": {"type": "string"}, "unit": {"$ref": "#/$defs/U"},
                             "n": {"anyOf": [{"type": "null"}, {"type": "integer"}]},
                             "tags": {"type": "array", "items": {"type": "string"}}}}
    assert instance(schema, schema) == {"city": "Paris", "unit": "c", "n": 1, "tags": ["Paris"]}
