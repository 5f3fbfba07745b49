"""Judge GBNF grammar files against a live server: converted or refused, and a short generation.

    python scripts/gbnf_table.py DIR [--url http://127.0.0.1:9999] [--max-tokens 48]

For every ``DIR/*.gbnf`` (for instance llama.cpp's ``grammars/`` folder): convert it to Lark
(:mod:`afm_struct.grammar.grammar_syntax`), compile it with the embedded tokenizer, then send it
as llama.cpp's ``grammar`` field to the server and check the output against the grammar.
Prints one markdown table row per file (the table in docs/constraints.md).
"""

from __future__ import annotations

import argparse
import pathlib

import httpx

from afm_struct.errors import AfmError
from afm_struct.grammar.compiler import compile_constraint
from afm_struct.grammar.grammar_syntax import to_lark
from afm_struct.grammar.spec import LarkRequest
from afm_struct.models import load_tokenizer


def judge(path: pathlib.Path, url: str, max_tokens: int, tokenizer: object) -> str:
    """One table row: file | conversion | compile rung | finish | output parses | output head."""
    text = path.read_text()
    try:
        compiled = compile_constraint(tokenizer, LarkRequest(to_lark(text, param="grammar")[0]))
    except AfmError as exc:
        return f"| `{path.name}` | refused: {exc.message} | | | | |"
    response = httpx.post(f"{url}/v1/chat/completions", timeout=600, json={
        "messages": [{"role": "user", "content": f"Write something in the {path.stem} format."}],
        "grammar": text, "max_tokens": max_tokens, "temperature": 0})
    if response.status_code != 200:
        return f"| `{path.name}` | converted | {compiled.rung.value} | {response.status_code} | | |"
    choice = response.json()["choices"][0]
    out = choice["message"]["content"] or ""
    head = out[:40].replace("\n", "\\n").replace("|", "\\|")
    return (f"| `{path.name}` | converted | {compiled.rung.value} | {choice['finish_reason']} | "
            f"{compiled.validate(out).ok} | `{head}` |")


def main() -> None:
    """Print the table for the grammar files of a directory."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=pathlib.Path)
    parser.add_argument("--url", default="http://127.0.0.1:9999")
    parser.add_argument("--max-tokens", type=int, default=48)
    args = parser.parse_args()
    tokenizer = load_tokenizer()
    print("| file | conversion | rung | finish | output parses | output (start) |")
    print("|---|---|---|---|---|---|")
    for path in sorted(args.directory.glob("*.gbnf")):
        print(judge(path, args.url, args.max_tokens, tokenizer), flush=True)


if __name__ == "__main__":
    main()
