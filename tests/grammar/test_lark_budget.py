"""The forced-run budget for grammar texts (grammar/closer/lark_budget.py): measured on the Lark text,
checked against llguidance itself.

Over the budget, the engine (asked anyway) compiles the grammar and fails at the first token or
two, on its parser's item budget or its lexer's; so the compiler refuses it first, with a
GrammarLimitError at ``grammar``.  Under it, and for long runs of a choice, the grammar compiles
exactly and a matcher walks it.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from afm_struct.errors import GrammarLimitError
from afm_struct.grammar.closer.lark_budget import (
    MAX_GRAMMAR_CHARS,
    MAX_RULE_DEPTH,
    grammar_forced_run,
    rule_depth,
)
from afm_struct.grammar.closer.literal_budget import MAX_FORCED_RUN
from afm_struct.grammar.compiler import ConstraintCompiler
from afm_struct.grammar.engines.protocol import allocate_bitmask
from afm_struct.grammar.grammar_syntax import gbnf_to_lark, to_lark
from afm_struct.grammar.spec import LarkRequest, Mode

CHAIN = "\n".join(["start: r0", *(f'r{i}: "a" r{i + 1}' for i in range(400)), 'r400: "b"'])


@pytest.mark.parametrize(("grammar", "run"), [
    ('start: "a"{1000000}', 1_000_000), ('start: "x"? "a"{1000000}', 1_000_001),
    ('start: ("a" "b"){300000}', 600_000), ('start: A\nA: "a"{1000000}', 1_000_000),
    ("start: /a{1000000}/", 1_000_000), ('start: "a"~20000', 20_000),
    ('start: x{1000000}\nx: "a"', 1_000_000), (CHAIN, 401),
    ('start: %json{"type": "string", "pattern": "^a{1000000}$"}', 1_000_000),
    ('start: "' + "a" * 20000 + '"', 20_000), ('start: "é"{6000}', 12_000),  # bytes, not characters
    # a choice at each step forces nothing, whatever the bound
    ('start: x{1000000}\nx: "a" | "b"', 2), ('start: "a"{0,1000000}', 1), ("start: /[ab]{1000000}/", 0),
    ('start: "a"i{50000}', 0), ('start: "a".."z"{1000000}', 0), ('start: x\nx: "a" x | "b"', 1),
    ('start: %json {"type": "object"}\n%ignore WS\n%import common.WS', 0),
    ('start: <|im_end|> "ab"{20}', 40),
])
def test_forced_run_of_a_grammar(grammar: str, run: int) -> None:
    found = grammar_forced_run(grammar)
    assert found is not None and found[0] == run


def test_gbnf_repeats_are_measured_after_conversion() -> None:
    found = grammar_forced_run(gbnf_to_lark('root ::= "a"{1000000}', param="grammar"))
    assert found is not None and found[0] == 1_000_000


def test_syntax_it_cannot_follow_is_left_to_the_engine() -> None:
    assert grammar_forced_run("start: x{a}\nx{t}: t") is None
    assert grammar_forced_run("start: (") is None


OVER = ['start: "a"{1000000}', 'start: "a"{40000}', 'start: A\nA: "a"{1000000}', "start: /a{1000000}/",
        'start: "x"? ("a" "b"){300000}',
        # Repeats the engine's regex syntax reads with spaces inside (Python's reads text there):
        "start: /a{ 1000000}/", "start: /a{1000000 }/", "start: /(ab){300000, 400000}/",
        'start: %json {"type": "string", "pattern": "^a{ 1000000}$"}']


def _walk(compiler: ConstraintCompiler, grammar: str, steps: int, rng: random.Random) -> str | None:
    """Step a fresh matcher of ``grammar`` (checks bypassed) by random allowed tokens; the
    engine's error, or None when it walked ``steps`` tokens (or finished) without one."""
    matcher = compiler.llguidance.compile_lark(grammar).new_matcher()
    row = allocate_bitmask(1, compiler.llguidance.vocab_size)[0]
    for _ in range(steps):
        if matcher.is_finished():
            break
        matcher.forced_tokens()
        matcher.fill_mask(row)
        bits = np.unpackbits(row.view(np.uint8), bitorder="little")[: compiler.llguidance.vocab_size]
        allowed = np.flatnonzero(bits)
        if matcher.error() or not len(allowed) or not matcher.advance(int(rng.choice(allowed))):
            assert matcher.over_limits(), matcher.error()  # a budget hit, told as one
            return matcher.error()
    return None


@pytest.mark.parametrize("grammar", OVER, ids=range(len(OVER)))
def test_over_the_budget_the_engine_fails_and_the_compiler_refuses(compiler, grammar: str) -> None:
    assert _walk(compiler, grammar, 3, random.Random(0)) is not None
    with pytest.raises(GrammarLimitError) as info:
        compiler.compile(LarkRequest(grammar))
    assert info.value.param == "grammar" and f"{MAX_FORCED_RUN:,}" in info.value.message


@pytest.mark.parametrize("grammar", ['start: "a"{10000}', 'start: A\nA: "a"{10000}', "start: /a{10000}/",
                                     'start: x{1,1000000}\nx: "a" | "b"', 'start: "a"{0,1000000}'])
def test_under_the_budget_the_engine_walks_it(compiler, grammar: str) -> None:
    assert compiler.compile(LarkRequest(grammar)).mode is Mode.ENFORCED
    assert _walk(compiler, grammar, 24, random.Random(1)) is None


def _chain(rules: int, order: int = 1) -> str:
    lines = [f'r{i}: ("a" r{i + 1})?' for i in range(rules)][::order]
    return "\n".join(["start: r0", *lines, f'r{rules}: "b"'])


@pytest.mark.parametrize("order", [1, -1])  # written top-down or bottom-up
def test_rule_depth_is_measured_without_recursion(order: int) -> None:
    assert rule_depth(_chain(20000, order)) == (20002, "start")
    assert rule_depth('start: x\nx: "a" x | "b"') == (2, "start")


def test_a_chain_at_the_depth_limit_compiles_and_one_over_is_refused(compiler) -> None:
    # 2,000 of these crash the process in the engine (so they are never sent to it here).
    assert compiler.compile(LarkRequest(_chain(MAX_RULE_DEPTH - 2))).mode is Mode.ENFORCED
    with pytest.raises(GrammarLimitError) as info:
        compiler.compile(LarkRequest(_chain(MAX_RULE_DEPTH - 1)))
    assert info.value.param == "grammar" and "rules deep" in info.value.message


def test_a_chain_at_the_depth_limit_compiles_on_a_thread_even_where_threads_get_512_kb() -> None:
    """macOS gives secondary threads 512 KB of stack; there a chain under MAX_RULE_DEPTH
    crashed the process (SIGSEGV) until afm_struct raised every new thread's stack."""
    code = f"""
import threading
threading.stack_size(512 * 1024)  # as macOS's default for threads other than the main one
import afm_struct
from afm_struct.grammar.compiler import ConstraintCompiler
from afm_struct.grammar.spec import LarkRequest
from afm_struct.models import load_tokenizer
from tests.grammar.test_lark_budget import _chain
compiler = ConstraintCompiler(load_tokenizer())
modes = []
grammar = LarkRequest(_chain({MAX_RULE_DEPTH - 2}))
worker = threading.Thread(target=lambda: modes.append(compiler.compile(grammar).mode))
worker.start()
worker.join()
print("compiled", modes[0].value)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "compiled" in done.stdout


def test_an_oversized_grammar_text_is_refused_before_it_is_read(compiler) -> None:
    """Lark, GBNF and choice lists over MAX_GRAMMAR_CHARS are a 400 at their field before any
    conversion or measuring (pure Python work shared with every running stream); one at the
    limit compiles."""
    words = [f"w{i:06d}" for i in range(MAX_GRAMMAR_CHARS // 10 + 1)]
    lark = "start: " + " | ".join(f'"{w}"' for w in words)
    assert len(lark) > MAX_GRAMMAR_CHARS
    with pytest.raises(GrammarLimitError) as info:
        compiler.compile(LarkRequest(lark))
    assert info.value.param == "grammar" and f"{MAX_GRAMMAR_CHARS:,}" in info.value.message
    gbnf = "root ::= " + " | ".join(f'"{w}"' for w in words)
    with pytest.raises(GrammarLimitError) as info:
        to_lark(gbnf, param="grammar")
    assert info.value.param == "grammar" and "characters long" in info.value.message
    fits = "start: " + " | ".join(f'"{w}"' for w in words[: (MAX_GRAMMAR_CHARS - 7) // 12])
    assert len(fits) <= MAX_GRAMMAR_CHARS
    assert compiler.compile(LarkRequest(fits)).mode is Mode.ENFORCED
