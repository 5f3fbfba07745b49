"""Judge GBNF grammar files against a live server: converted or refused, and a short generation.

    python scripts/gbnf_table.py [DIR] [--url http://127.0.0.1:9999] [--max-tokens 20]

For every ``DIR/*.gbnf`` (by default tests/fixtures/llama_cpp_grammars, llama.cpp's
``grammars/`` folder): convert it to Lark (:mod:`afm_struct.grammar.grammar_syntax`), compile it
with the embedded tokenizer, then send it as llama.cpp's ``grammar`` field to the server and
check the output against the grammar: a whole sentence of it when the model stopped, a prefix
it can complete when the budget cut the output.  Prints the markdown table of
docs/constraints.md and a "converted N / refused M" line.
"""

from __future__ import annotations

import argparse
import pathlib

import httpx

from afm_struct.errors import AfmError
from afm_struct.grammar.compiler import CompiledConstraint, compile_constraint
from afm_struct.grammar.grammar_syntax import to_lark
from afm_struct.grammar.spec import LarkRequest
from afm_struct.models import load_tokenizer

FIXTURE = pathlib.Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "llama_cpp_grammars"


def output_check(compiled: CompiledConstraint, output: str, finish: str) -> str:
    """``whole sentence`` / ``valid prefix`` when the grammar takes ``output`` as the finish
    reason requires (a stopped output must be whole, a cut one a prefix), else ``REJECTED``."""
    if compiled.validate(output).ok:
        return "whole sentence"
    if finish == "length" and compiled.is_prefix(output):
        return "valid prefix"
    return "REJECTED"


def judge(path: pathlib.Path, url: str, max_tokens: int, tokenizer: object) -> tuple[bool, str]:
    """Whether ``path`` converted, and its table row: file | conversion | rung | finish | output
    check | output head."""
    text = path.read_text(encoding="utf-8")
    try:
        compiled = compile_constraint(tokenizer, LarkRequest(to_lark(text, param="grammar")[0]))
    except AfmError as exc:
        return False, f"| `{path.name}` | refused: {exc.message} | | | | |"
    response = httpx.post(f"{url}/v1/chat/completions", timeout=600, json={
        "messages": [{"role": "user", "content": f"Write something in the {path.stem} format."}],
        "grammar": text, "max_tokens": max_tokens, "temperature": 0})
    if response.status_code != 200:
        message = response.json()["error"]["message"]
        return False, f"| `{path.name}` | refused ({response.status_code}): {message} | | | | |"
    choice = response.json()["choices"][0]
    out = choice["message"]["content"] or ""
    head = out[:40].replace("\n", "\\n").replace("|", "\\|")
    return True, (f"| `{path.name}` | converted | {compiled.rung.value} | {choice['finish_reason']} | "
                  f"{output_check(compiled, out, choice['finish_reason'])} | `{head}` |")


def main() -> None:
    """Print the table for the grammar files of a directory."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=pathlib.Path, nargs="?", default=FIXTURE)
    parser.add_argument("--url", default="http://127.0.0.1:9999")
    parser.add_argument("--max-tokens", type=int, default=20)
    args = parser.parse_args()
    tokenizer = load_tokenizer()
    print("| file | conversion | rung | finish | output check | output (start) |")
    print("|---|---|---|---|---|---|")
    converted = refused = 0
    for path in sorted(args.directory.glob("*.gbnf")):
        ok, row = judge(path, args.url, args.max_tokens, tokenizer)
        converted, refused = converted + ok, refused + (not ok)
        print(row, flush=True)
    print(f"\nconverted {converted} / refused {refused}")


if __name__ == "__main__":
    main()
