"""What is derived from a tokenizer has one owner: built once per model, shared by every
compile and every request, freed with the tokenizer.

Before, three module-level caches keyed by ``id(tokenizer)`` held these structures and the
tokenizer itself (so a freed model never left memory), and concurrent first uses of the
closing vocabulary each built their own.
"""

from __future__ import annotations

import gc
import threading
import time
import weakref
from typing import Any

import llguidance.hf

from afm_struct.decoding.hidden_tokens import hidden_token_ids
from afm_struct.decoding.logprobs import token_table
from afm_struct.decoding.tokenizer_parts import build_tokenizer_parts
from afm_struct.grammar.closer.completion import closing_vocab_for
from afm_struct.grammar.closer.vocab import ClosingVocab
from afm_struct.grammar.compiler import ConstraintCompiler, compile_constraint, get_compiler
from afm_struct.grammar.engines.llguidance_engine import ll_tokenizer_for
from afm_struct.grammar.spec import CompileOptions, JsonSchemaRequest, RegexRequest
from afm_struct.models import load_tokenizer

OPTIONS = [CompileOptions(), CompileOptions(whitespace="compact"), CompileOptions(property_order="any")]


def _counting(monkeypatch: Any) -> dict[str, int]:
    """Count the real constructions of the two costly parts (slowed a little, so that
    concurrent first uses overlap), whatever code path asks for them."""
    counts = {"ll_tokenizer": 0, "closing_vocab": 0}
    from_tokenizer, build = llguidance.hf.from_tokenizer, ClosingVocab.build.__func__

    def counted_ll(*args: Any, **kwargs: Any) -> Any:
        counts["ll_tokenizer"] += 1
        time.sleep(0.05)
        return from_tokenizer(*args, **kwargs)

    def counted_build(cls: Any, *args: Any) -> Any:
        counts["closing_vocab"] += 1
        time.sleep(0.05)
        return build(cls, *args)

    monkeypatch.setattr(llguidance.hf, "from_tokenizer", counted_ll)
    monkeypatch.setattr(ClosingVocab, "build", classmethod(counted_build))
    return counts


def test_built_once_across_many_compiles_and_threads(monkeypatch: Any) -> None:
    counts = _counting(monkeypatch)
    tokenizer = load_tokenizer()  # a fresh model: nothing built yet
    start = threading.Barrier(6)
    errors: list[BaseException] = []

    def use(k: int) -> None:
        try:
            start.wait()
            closing_vocab_for(tokenizer)
            token_table(tokenizer)
            for i in range(8):
                options = OPTIONS[(i + k) % len(OPTIONS)]
                schema = {"type": "object", "properties": {f"p{k}_{i}": {"type": "integer"}}}
                compile_constraint(tokenizer, JsonSchemaRequest(schema), options)
                compile_constraint(tokenizer, RegexRequest(f"[a-z]{{{i + 1}}}"), options)
        except BaseException as exc:  # reported below: a thread's failure must fail the test
            errors.append(exc)

    threads = [threading.Thread(target=use, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    # A compiler built directly (benchmarks, the CLI) shares the same llguidance tokenizer.
    ConstraintCompiler(tokenizer, CompileOptions(whitespace="flexible")).close()
    assert counts == {"ll_tokenizer": 1, "closing_vocab": 1}
    state = tokenizer.derived
    assert state.builds == {"ll_tokenizer": 1, "closing_vocab": 1, "token_table": 1, "compiler": 3}
    assert get_compiler(tokenizer, OPTIONS[1]) is state.peek(("compiler", OPTIONS[1]))
    assert ll_tokenizer_for(tokenizer) is state.peek("ll_tokenizer")
    assert token_table(tokenizer) is state.peek("token_table")


def test_two_models_never_share_derived_state_and_dropping_one_releases_it() -> None:
    first, second = load_tokenizer(), load_tokenizer()
    # What the generator's warm-up builds at load: every part a plain request uses.
    build_tokenizer_parts(second)
    warm = {"ll_tokenizer": 1, "closing_vocab": 1, "token_table": 1, "hidden_tokens": 1}
    assert second.derived.builds == warm and not first.derived.builds
    token_table(second), closing_vocab_for(second), hidden_token_ids(second)
    assert second.derived.builds == warm
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    derived: list[weakref.ref[Any]] = []
    for tok in (first, second):
        # A compile of the same request is its own per model: no cache hit across models.
        constraint = compile_constraint(tok, JsonSchemaRequest(schema))
        assert not constraint.cached and constraint.tokenizer is tok
        assert compile_constraint(tok, JsonSchemaRequest(schema)).cached
        hidden_token_ids(tok, keep=("<tool_call>",))
        token_table(tok).lookup(7)
        state = tok.derived
        derived += [weakref.ref(state), weakref.ref(closing_vocab_for(tok)), weakref.ref(token_table(tok)),
                    weakref.ref(get_compiler(tok))]
    mine, theirs = derived[:4], derived[4:]
    assert all(a() is not b() for a, b in zip(mine, theirs, strict=True))
    assert ll_tokenizer_for(first) is not ll_tokenizer_for(second)
    gone = weakref.ref(first)
    del first, constraint, state
    gc.collect()
    # Before: the hidden-token cache (an lru_cache keyed by the tokenizer) pinned the model.
    assert gone() is None
    assert [ref() for ref in mine] == [None] * 4
    assert all(ref() is not None for ref in theirs)
    assert compile_constraint(second, JsonSchemaRequest(schema)).cached
    assert second.derived.builds["ll_tokenizer"] == 1
