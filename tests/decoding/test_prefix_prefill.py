"""Prompt prefixes reused from the prefix cache, and waiting prompts prefilled together.

Both only change how much work a prompt costs: outputs must stay what each request produces
alone (scripted models exactly; the real model with greedy decoding).
"""

from __future__ import annotations

from typing import Any

import pytest

from afm_struct.decoding.generator import Finished, GenerationRequest, Generator, TextDelta
from afm_struct.decoding.prefix_cache import PrefixCache
from afm_struct.decoding.sampling import SamplingParams
from afm_struct.grammar.compiler import compile_constraint
from afm_struct.grammar.spec import JsonSchemaRequest
from afm_struct.testing import Script, ScriptedCacheOps, scripted_loaded_model

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                           "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


class _ListOps:
    """Snapshots are token lists; a restored cache is the prefix itself."""

    def snapshot(self, seq_cache: list[Any]) -> Any:
        return list(seq_cache)

    def restore(self, snapshot: Any, length: int) -> list[Any]:
        return list(snapshot[:length])


def test_prefix_cache_finds_the_longest_shared_prefix() -> None:
    cache = PrefixCache(_ListOps(), capacity=2, min_length=3)
    cache.store([1, 2, 3, 4, 5], [1, 2, 3, 4, 5])
    cache.store([1, 2, 9, 9], [1, 2, 9, 9])
    hit = cache.lookup([1, 2, 3, 4, 7, 8])
    assert hit is not None and hit.length == 4 and hit.cache == [1, 2, 3, 4]
    assert cache.peek([1, 2, 3, 4, 7, 8]) == 4
    # The last prompt token is always computed: it gives the first token's logits.
    full = cache.lookup([1, 2, 3, 4, 5])
    assert full is not None and full.length == 4
    assert cache.lookup([1, 2, 8]) is None  # 2 shared tokens: under min_length
    cache.store([7, 7, 7, 7], [7, 7, 7, 7])  # capacity 2: the least recently used entry goes
    assert cache.lookup([1, 2, 9, 9, 1]) is None
    assert cache.hits == 2 and cache.reused_tokens == 8
    assert PrefixCache(_ListOps(), capacity=0).lookup([1, 2, 3]) is None


def _requests(tokenizer: Any, names: list[str]) -> list[GenerationRequest]:
    constraint = compile_constraint(tokenizer, JsonSchemaRequest(PERSON))
    return [GenerationRequest(tokenizer.encode_chat([{"role": "user", "content": f"Describe {n}."}]),
                              SamplingParams(temperature=0, max_tokens=40), constraint=constraint)
            for n in names]


def _run(gen: Generator, waves: list[list[GenerationRequest]]) -> list[Finished]:
    """Each wave is admitted at once, after the previous one finished."""
    done: list[Finished] = []
    for wave in waves:
        events: list[list[Any]] = [[] for _ in wave]
        for req, evs in zip(wave, events, strict=True):
            gen.add(req, evs.append)
        while gen.has_work:
            gen.step()
        for evs in events:
            fin = evs[-1]
            assert isinstance(fin, Finished)
            assert "".join(e.text for e in evs if isinstance(e, TextDelta)) == fin.text
            done.append(fin)
    return done


def _script(tokenizer: Any) -> Script:
    def say(ids: list[int]) -> str:
        name = tokenizer.decode(ids).split("Describe ")[1].split(".")[0]
        return f'{{"name": "{name}", "age": {len(ids)}}}'

    return Script(say)


def test_scripted_prefix_hits_keep_outputs(tokenizer) -> None:  # type: ignore[no-untyped-def]
    names = ["Ada", "Alan", "Grace", "Edsger"]
    plain = Generator.from_loaded(scripted_loaded_model(tokenizer, _script(tokenizer)),
                                  prefix_cache_size=0, batch_prefill=False)
    reuse = Generator.from_loaded(scripted_loaded_model(tokenizer, _script(tokenizer)))
    waves = [_requests(tokenizer, names[:2]), _requests(tokenizer, names[2:])]
    expected = _run(plain, waves)
    got = _run(reuse, [_requests(tokenizer, names[:2]), _requests(tokenizer, names[2:])])
    assert [f.text for f in got] == [f.text for f in expected]
    assert expected[0].text.startswith('{"name": "Ada"')
    # The first wave shares its system turn (computed once), the second starts from the first
    # wave's prompts.
    assert all(f.usage.cached_tokens >= 8 for f in got)
    assert reuse.prefiller.prefix_cache.hits == 4 and plain.prefiller.prefix_cache.hits == 0


@pytest.mark.parametrize("together", [True, False])
def test_waiting_prompts_prefill_in_one_forward_pass(tokenizer, together: bool) -> None:  # type: ignore[no-untyped-def]
    loaded = scripted_loaded_model(tokenizer, _script(tokenizer))
    gen = Generator.from_loaded(loaded, prefix_cache_size=0, batch_prefill=together)
    requests = _requests(tokenizer, ["Ada", "Alan", "Grace"])
    finished: list[list[Any]] = [[] for _ in requests]
    for req, evs in zip(requests, finished, strict=True):
        gen.add(req, evs.append)
    gen.step()  # nothing decodes yet: this step only prefills
    assert loaded.model.calls == (1 if together else 3)
    assert gen.decoding == 3
    while gen.has_work:
        gen.step()
    texts = [evs[-1].text for evs in finished]
    assert [t.split('"')[3] for t in texts] == ["Ada", "Alan", "Grace"]


def test_batched_prefill_mixes_cached_and_fresh_prompts(tokenizer) -> None:  # type: ignore[no-untyped-def]
    loaded = scripted_loaded_model(tokenizer, _script(tokenizer))
    gen = Generator.from_loaded(loaded)
    first = _run(gen, [_requests(tokenizer, ["Ada"])])
    raw = GenerationRequest(tokenizer.encode("Describe Zed. no template"),
                            SamplingParams(temperature=0, max_tokens=40))
    mixed = [*_requests(tokenizer, ["Alan"]), raw]
    calls = loaded.model.calls
    events: list[list[Any]] = [[], []]
    for req, evs in zip(mixed, events, strict=True):
        gen.add(req, evs.append)
    gen.step()
    assert loaded.model.calls == calls + 1  # one forward pass for a restored and a fresh cache
    while gen.has_work:
        gen.step()
    assert first[0].text.startswith('{"name": "Ada"')
    assert events[0][-1].text.startswith('{"name": "Alan"') and events[0][-1].usage.cached_tokens > 0
    assert events[1][-1].text.startswith('{"name": "Zed"')
    assert isinstance(ScriptedCacheOps().snapshot([gen.make_cache()[0]]), list)


def test_real_model_outputs_do_not_change(embedded) -> None:  # type: ignore[no-untyped-def]
    tok = embedded.tokenizer
    names = ["Ada Lovelace", "Alan Turing", "Grace Hopper", "Edsger Dijkstra", "Barbara Liskov"]

    def waves() -> list[list[GenerationRequest]]:
        reqs = _requests(tok, names)
        for r in reqs:
            r.params = SamplingParams(temperature=0, max_tokens=16)
        return [reqs[:3], reqs[3:]]

    plain = _run(Generator.from_loaded(embedded, prefix_cache_size=0, batch_prefill=False), waves())
    fast_gen = Generator.from_loaded(embedded)
    fast = _run(fast_gen, waves())
    assert [f.text for f in fast] == [f.text for f in plain]
    assert fast_gen.prefiller.prefix_cache.hits >= 2
    assert sum(f.usage.cached_tokens for f in fast) > 0


def test_a_burst_computes_its_shared_prefix_once(tokenizer) -> None:  # type: ignore[no-untyped-def]
    loaded = scripted_loaded_model(tokenizer, _script(tokenizer))
    gen = Generator.from_loaded(loaded)
    requests = _requests(tokenizer, ["Ada", "Alan", "Grace"])
    shared = min(len(r.prompt_ids) for r in requests)
    finished: list[list[Any]] = [[] for _ in requests]
    for req, evs in zip(requests, finished, strict=True):
        gen.add(req, evs.append)
    gen.step()
    # One pass over the shared system turn, one over the three tails.
    assert loaded.model.calls == 2 and gen.decoding == 3
    while gen.has_work:
        gen.step()
    for name, evs in zip(["Ada", "Alan", "Grace"], finished, strict=True):
        fin = evs[-1]
        assert fin.text.startswith(f'{{"name": "{name}"')
        assert 8 <= fin.usage.cached_tokens < shared
    plain = Generator.from_loaded(scripted_loaded_model(tokenizer, _script(tokenizer)),
                                  prefix_cache_size=0, batch_prefill=False)
    assert [f.text for f in _run(plain, [_requests(tokenizer, ["Ada", "Alan", "Grace"])])] == [
        evs[-1].text for evs in finished]


def test_a_prompt_missing_few_tokens_feeds_them_in_the_decode_pass(tokenizer) -> None:  # type: ignore[no-untyped-def]
    """A repeated prompt (all but its last token cached) joins the running batch and feeds its
    tail in the batch's own forward pass: no pass of its own, same output."""
    loaded = scripted_loaded_model(tokenizer, _script(tokenizer))
    gen = Generator.from_loaded(loaded)
    first = _run(gen, [_requests(tokenizer, ["Ada"])])
    running: list[Any] = []
    gen.add(_requests(tokenizer, ["Alan"])[0], running.append)
    gen.step()
    gen.step()
    assert gen.decoding == 1
    repeat: list[Any] = []
    gen.add(_requests(tokenizer, ["Ada"])[0], repeat.append)
    calls = loaded.model.calls
    gen.step()
    assert loaded.model.calls == calls + 1  # one pass: Alan's next token and Ada's prompt tail
    assert gen.decoding == 2 and not gen.prefiller.waiting
    while gen.has_work:
        gen.step()
    assert repeat[-1].text == first[0].text
    assert repeat[-1].usage.cached_tokens == len(_requests(tokenizer, ["Ada"])[0].prompt_ids) - 1
    assert repeat[-1].timings.prefill_s > 0
    assert running[-1].text.startswith('{"name": "Alan"')
    # With joining off, the same prompt takes a prefill pass of its own.
    off = Generator.from_loaded(scripted_loaded_model(tokenizer, _script(tokenizer)), join_tail=0)
    _run(off, [_requests(tokenizer, ["Ada"])])
    off.add(_requests(tokenizer, ["Alan"])[0], lambda e: None)
    off.step()
    off.step()
    off.add(_requests(tokenizer, ["Ada"])[0], lambda e: None)
    calls = off.model.calls
    off.step()
    assert off.model.calls == calls + 2


def test_real_model_joined_tail_matches_alone(embedded) -> None:  # type: ignore[no-untyped-def]
    tok = embedded.tokenizer
    reqs = _requests(tok, ["Ada Lovelace", "Alan Turing"])
    for r in reqs:
        r.params = SamplingParams(temperature=0, max_tokens=16)
    alone = _run(Generator.from_loaded(embedded, prefix_cache_size=0, batch_prefill=False,
                                       join_tail=0), [[reqs[0]], [reqs[1]]])
    gen = Generator.from_loaded(embedded)
    _run(gen, [[reqs[0]]])  # Ada's prompt is now cached
    events: list[list[Any]] = [[], []]
    gen.add(reqs[1], events[1].append)
    gen.step()
    gen.step()
    gen.add(reqs[0], events[0].append)  # joins Alan's running batch with a 1-token tail
    gen.step()
    assert gen.decoding == 2
    while gen.has_work:
        gen.step()
    assert [evs[-1].text for evs in events] == [f.text for f in alone]
