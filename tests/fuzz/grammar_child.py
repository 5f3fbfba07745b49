"""The grammar fuzzer's child process: compiles constraints read from stdin, one per line.

``python -m tests.fuzz.grammar_child raw`` hands each to llguidance itself (the engine alone:
``grammar_from_json_schema`` / ``grammar_from_lark`` / ``grammar_from_regex``, then
``validate_grammar``); ``... ours`` to :func:`afm_struct.grammar.compiler.compile_constraint` with
the embedded tokenizer (the whole compile path: checks, rewrites, ladder, the number guard).
Each line in is ``[kind, text]``, each line out ``{"status": ..., "detail": ...}``; a native
crash ends the process, which the parent (tests/fuzz/grammar_fuzz.py) sees as a signal.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any


def _raw() -> Callable[[str, str], dict[str, Any]]:
    import llguidance

    def run(kind: str, text: str) -> dict[str, Any]:
        try:
            if kind == "json":
                grammar = llguidance.LLMatcher.grammar_from_json_schema(text)
            elif kind == "lark":
                grammar = llguidance.LLMatcher.grammar_from_lark(text)
            else:
                grammar = llguidance.LLMatcher.grammar_from_regex(text)
            error = llguidance.LLMatcher.validate_grammar(grammar)
        except Exception as exc:  # the engine's refusals come back as exceptions or a message
            return {"status": "refused", "detail": f"{type(exc).__name__}: {str(exc)[:200]}"}
        return {"status": "refused", "detail": error[:200]} if error else {"status": "ok", "detail": ""}

    return run


def _ours() -> Callable[[str, str], dict[str, Any]]:
    from afm_struct.errors import AfmError
    from afm_struct.grammar.compiler import compile_constraint
    from afm_struct.grammar.spec import JsonSchemaRequest, LarkRequest, RegexRequest
    from afm_struct.models import load_tokenizer

    tokenizer = load_tokenizer()

    def run(kind: str, text: str) -> dict[str, Any]:
        try:
            if kind == "json":
                request: Any = JsonSchemaRequest(json.loads(text))
            elif kind == "lark":
                request = LarkRequest(text)
            else:
                request = RegexRequest(text)
            compiled = compile_constraint(tokenizer, request)
        except AfmError as exc:
            return {"status": "refused", "detail": f"{exc.status} {exc.code}: {str(exc)[:200]}"}
        except Exception as exc:  # a bug: reported, the fuzzer goes on
            return {"status": "error", "detail": f"{type(exc).__name__}: {str(exc)[:200]}"}
        return {"status": "ok", "detail": f"{compiled.mode.value} {compiled.rung.value} {compiled.reason}"}

    return run


def main() -> None:
    run = _raw() if sys.argv[1] == "raw" else _ours()
    out = sys.stdout
    sys.stdout = sys.stderr  # stray prints must not corrupt the replies
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        kind, text = json.loads(line)
        out.write(json.dumps(run(kind, text)) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
