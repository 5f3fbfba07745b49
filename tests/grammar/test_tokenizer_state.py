"""What is derived from a tokenizer has one owner: built once per model, shared by every
compile and every request, freed with the tokenizer; the parts that are a function of the
vocabulary alone (llguidance's tokenizer, the closing vocabulary) are built once per vocabulary.

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
from afm_struct.models import derived as derived_module
from afm_struct.models import load_tokenizer
from afm_struct.models.tokenizer import Tokenizer

OPTIONS = [CompileOptions(), CompileOptions(whitespace="compact"), CompileOptions(property_order="any")]


def _counting(monkeypatch: Any) -> dict[str, int]:
    """Count the real constructions of the two costly parts (slowed a little, so that
    concurrent first uses overlap), whatever code path asks for them; the process's shared
    vocabulary parts start empty."""
    # In-process sharing is what is counted: the disk cache (tested in tests/models/test_disk_cache.py)
    # would read the closing vocabulary back instead of building it.
    monkeypatch.setenv("AFM_STRUCT_NO_CACHE", "1")
    monkeypatch.setattr(derived_module, "_shared", derived_module.OrderedDict())
    monkeypatch.setattr(derived_module, "_shared_builds", {})
    counts = {"ll_tokenizer": 0, "closing_vocab": 0}
    from_tokenizer, build = llguidance.hf.from_tokenizer, ClosingVocab.build.__func__
    construct = llguidance.LLTokenizer

    def counted_ll(*args: Any, **kwargs: Any) -> Any:
        counts["ll_tokenizer"] += 1
        time.sleep(0.05)
        return from_tokenizer(*args, **kwargs)

    def counted_construct(*args: Any, **kwargs: Any) -> Any:
        # ll_tokenizer_for builds from the tokenizer's JSON directly where it can.
        counts["ll_tokenizer"] += 1
        time.sleep(0.05)
        return construct(*args, **kwargs)

    def counted_build(cls: Any, *args: Any) -> Any:
        counts["closing_vocab"] += 1
        time.sleep(0.05)
        return build(cls, *args)

    monkeypatch.setattr(llguidance.hf, "from_tokenizer", counted_ll)
    monkeypatch.setattr(llguidance, "LLTokenizer", counted_construct)
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


def test_two_loads_of_one_vocabulary_share_its_parts_not_their_compilers(monkeypatch: Any) -> None:
    counts = _counting(monkeypatch)
    first, second = load_tokenizer(), load_tokenizer()
    # What the generator's warm-up builds at load: every part a plain request uses.
    build_tokenizer_parts(second)
    warm = {"ll_tokenizer": 1, "closing_vocab": 1, "token_table": 1, "hidden_tokens": 1}
    assert second.derived.builds == warm and not first.derived.builds
    build_tokenizer_parts(first)
    # The vocabulary's parts come from the second load; the rest is the first's own.
    assert first.derived.builds == {"token_table": 1, "hidden_tokens": 1}
    assert counts == {"ll_tokenizer": 1, "closing_vocab": 1}
    assert ll_tokenizer_for(first) is ll_tokenizer_for(second)
    assert closing_vocab_for(first) is closing_vocab_for(second)
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    own: list[weakref.ref[Any]] = []
    for tok in (first, second):
        # A compile of the same request is its own per model: no cache hit across models.
        constraint = compile_constraint(tok, JsonSchemaRequest(schema))
        assert not constraint.cached and constraint.tokenizer is tok
        assert compile_constraint(tok, JsonSchemaRequest(schema)).cached
        hidden_token_ids(tok, keep=("<tool_call>",))
        token_table(tok).lookup(7)
        state = tok.derived
        own += [weakref.ref(state), weakref.ref(token_table(tok)), weakref.ref(get_compiler(tok))]
    mine, theirs = own[:3], own[3:]
    assert all(a() is not b() for a, b in zip(mine, theirs, strict=True))
    gone = weakref.ref(first)
    del first, constraint, state
    gc.collect()
    # Before: the hidden-token cache (an lru_cache keyed by the tokenizer) pinned the model.
    assert gone() is None
    assert [ref() for ref in mine] == [None] * 3
    assert all(ref() is not None for ref in theirs)
    assert compile_constraint(second, JsonSchemaRequest(schema)).cached
    assert second.derived.builds["ll_tokenizer"] == 1


def test_another_vocabulary_shares_nothing_and_only_the_latest_vocabularies_stay(monkeypatch: Any) -> None:
    counts = _counting(monkeypatch)
    monkeypatch.setattr(derived_module, "SHARED_VOCABULARIES", 1)
    base = load_tokenizer()

    def again(vocab_size: int) -> Tokenizer:  # a new load over the same Rust vocabulary
        return Tokenizer(base.hf, eos_ids=sorted(base.eos_token_ids), vocab_size=vocab_size)

    # The same vocabulary read as a model with more embedding rows: another fingerprint.
    wider = again(base.vocab_size + 64)
    assert again(base.vocab_size).vocabulary_fingerprint() == base.vocabulary_fingerprint()
    assert wider.vocabulary_fingerprint() != base.vocabulary_fingerprint()
    closing_vocab_for(base)
    assert closing_vocab_for(again(base.vocab_size)) is closing_vocab_for(base)
    assert closing_vocab_for(wider) is not closing_vocab_for(base)
    assert counts["closing_vocab"] == 2
    # ``base`` keeps what it built; a new load of its vocabulary, no longer among the latest
    # (one here), builds again.
    assert closing_vocab_for(base) is not closing_vocab_for(again(base.vocab_size))
    assert counts["closing_vocab"] == 3
