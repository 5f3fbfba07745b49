"""A seeded random traffic driver for the generator: shapes nobody rehearsed.

One run draws a generator configuration (batch size 1-12, prefill slice sizes, tail joins,
prefix cache on or off) and a stream of requests (equal-length prompts, shared prefixes, exact
repeats, prompts longer than a prefill slice; json_schema, json_object or free; max_tokens;
stop strings; temperature with a seed), admits them a few at a time between steps, and cancels
some at random points.  It checks, after every step, what must hold whatever the traffic:

* ``step()`` never raises, and every batch cache holds exactly as many rows as its group;
* every request gets exactly one ``Finished``, and nothing after it;
* a request cancelled before it finished ends ``cancelled``;
* a request that was not cancelled ends as it does alone on a fresh generator (text and
  reason, exactly, for deterministic models);
* the generator is idle at the end (no groups, nothing prefilling).

The crash it would have caught: a burst prefilled together (its batch cache built with spare
rows) joining a running batch copied the spare rows too (commit bad82d3).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from typing import Any

from afm_struct.decoding.generator import Finished, GenerationRequest, Generator
from afm_struct.decoding.sampling import SamplingParams
from afm_struct.grammar.compiler import compile_constraint
from afm_struct.grammar.spec import JsonObjectRequest, JsonSchemaRequest

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                      "age": {"type": "integer"}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "array", "items": {"enum": ["x", "y", "z"]}, "minItems": 1, "maxItems": 4},
]
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def examples(default: int) -> int:
    """How many random runs: ``AFM_STRUCT_RANDOM_EXAMPLES`` overrides the CI-sized default."""
    return int(os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES", "0")) or default


@dataclass
class Tracked:
    """One request of a run and what happened to it."""

    request: GenerationRequest
    events: list[Any] = field(default_factory=list)
    cancel: Any = None
    cancelled_at_step: int | None = None


def draw_requests(rng: random.Random, tokenizer: Any, constraints: list[Any], n: int,
                  *, max_tokens: int, long_words: int) -> list[GenerationRequest]:
    """``n`` requests in shapes that stress the batch cache and the prefix cache."""
    base = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 8)))
    out: list[GenerationRequest] = []
    for i in range(n):
        shape = rng.choice(["equal", "equal", "prefix", "repeat", "long", "short"])
        if shape == "equal":
            text = f"{base} item {rng.randint(1, 9)}"  # same token length within a run
        elif shape == "prefix":
            text = f"{base} " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))
        elif shape == "repeat" and out:
            out.append(rng.choice(out))
            continue
        elif shape == "long":
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(long_words // 2, long_words)))
        else:
            text = rng.choice(WORDS)
        prompt = tokenizer.encode_chat([{"role": "user", "content": text}])
        kind = rng.randrange(len(constraints) + 1)
        params = SamplingParams(
            temperature=rng.choice([0.0, 0.0, 0.9]), seed=rng.randrange(1000),
            max_tokens=rng.randint(1, max_tokens),
            stop=tuple(rng.choice([[], [], ["}"], ["a"], [" z", "ta"]])))
        out.append(GenerationRequest(prompt, params, constraint=constraints[kind - 1] if kind else None,
                                     request_id=f"r{i}"))
    return out


def make_constraints(tokenizer: Any) -> list[Any]:
    """The json_schema and json_object constraints the runs draw from."""
    return [*(compile_constraint(tokenizer, JsonSchemaRequest(s, strict=True)) for s in SCHEMAS),
            compile_constraint(tokenizer, JsonObjectRequest())]


def check_batch_rows(gen: Generator) -> None:
    """Every batched group's cache holds one row per sequence, in every layer."""
    for group in gen.batch.groups:
        if group.batched:
            for layer in group.cache:
                lengths = getattr(layer, "lengths", None)
                if lengths is not None:
                    assert len(lengths) == len(group.rows), (len(lengths), len(group.rows))


def run_traffic(rng: random.Random, make_gen: Any, requests: list[GenerationRequest],
                *, cancel_rate: float) -> list[Tracked]:
    """Admit ``requests`` a few at a time between steps, cancel some; check invariants as it goes."""
    import threading

    gen = make_gen()
    tracked = [Tracked(r, cancel=threading.Event()) for r in requests]
    waiting = list(tracked)
    step = 0
    while waiting or gen.has_work:
        for _ in range(rng.choice([0, 0, 1, 1, 2, 4, 8])):
            if waiting:
                t = waiting.pop(0)
                gen.add(t.request, t.events.append, t.cancel)
        if gen.has_work:
            gen.step()
            step += 1
            check_batch_rows(gen)
        running = [t for t in tracked if t.events is not None and t.cancelled_at_step is None
                   and not any(isinstance(e, Finished) for e in t.events) and t not in waiting]
        if running and rng.random() < cancel_rate:
            victim = rng.choice(running)
            victim.cancel.set()
            victim.cancelled_at_step = step
        assert step < 20_000, "the generator does not make progress"
    assert not gen.batch.groups and not gen.prefiller.waiting
    for t in tracked:
        finished = [i for i, e in enumerate(t.events) if isinstance(e, Finished)]
        assert len(finished) == 1 and finished[0] == len(t.events) - 1, t.events[-3:]
        if t.cancelled_at_step is not None:
            assert t.events[-1].reason == "cancelled"
        assert t.events[-1].reason != "error", t.events[-1].error
    return tracked


def solo(make_gen: Any, request: GenerationRequest) -> Finished:
    """``request`` alone on a fresh generator."""
    events = list(make_gen().generate(request))
    assert isinstance(events[-1], Finished)
    return events[-1]
