"""Random traffic through the generator (random_traffic.py): scripted model and the real one.

CI runs a few seeds; ``AFM_STRUCT_RANDOM_EXAMPLES=200`` runs many more by hand.
"""

from __future__ import annotations

import random

import pytest

from afm_struct.decoding.generator import Generator
from afm_struct.testing import Script, scripted_loaded_model

from .random_traffic import draw_requests, examples, make_constraints, run_traffic, solo


def _script_text(prompt_ids: list[int]) -> str:
    # Deterministic per prompt, and a valid instance of every constraint the runs use, so the
    # constrained outputs follow the script for a while and then diverge (masks at work).
    n = sum(prompt_ids) % 97
    return f'{{"name": "N{n}", "age": {n}}} and then ["x", "y"] more words about {n}'


def _gen_factory(loaded, rng: random.Random):
    config = {"max_batch": rng.randint(1, 12), "prefill_budget": rng.choice([8, 16, 64, 512]),
              "busy_prefill_budget": rng.choice([4, 16, 128]), "join_tail": rng.choice([0, 2, 4]),
              "prefix_cache_size": rng.choice([0, 4, 16]), "batch_prefill": rng.random() < 0.8}

    def make() -> Generator:
        return Generator.from_loaded(loaded, **config)

    return make, config


@pytest.mark.parametrize("seed", range(examples(6)))
def test_random_traffic_scripted_matches_alone(tokenizer, seed):
    rng = random.Random(seed)
    loaded = scripted_loaded_model(tokenizer, Script(_script_text))
    make, config = _gen_factory(loaded, rng)
    requests = draw_requests(rng, tokenizer, make_constraints(tokenizer), rng.randint(4, 24),
                             max_tokens=30, long_words=120)
    tracked = run_traffic(rng, make, requests, cancel_rate=0.15)
    for t in tracked:
        if t.cancelled_at_step is None:
            alone = solo(lambda: Generator.from_loaded(loaded), t.request)
            got = t.events[-1]
            assert (got.text, got.reason) == (alone.text, alone.reason), (config, t.request.request_id)


# Seeds 4 and 8 reach the fan-out crash's shape (a burst prefilled together joining a running
# batch): on the code before bad82d3 they fail the row-count check, 4 of 16 seeds did.
REAL_SEEDS = [4, 8] if examples(0) == 0 else list(range(examples(0)))


@pytest.mark.model
@pytest.mark.parametrize("seed", REAL_SEEDS)
def test_random_traffic_real_model(embedded, seed):
    """The real batch cache (spare rows, reuse of the last batch, prefix restores, packed ragged
    steps) under random arrivals; greedy requests end as they do alone."""
    rng = random.Random(1000 + seed)
    make, config = _gen_factory(embedded, rng)
    requests = draw_requests(rng, embedded.tokenizer, make_constraints(embedded.tokenizer),
                             rng.randint(6, 14), max_tokens=8, long_words=60)
    tracked = run_traffic(rng, make, requests, cancel_rate=0.1)
    fresh = Generator.from_loaded(embedded)
    for t in tracked:
        if t.cancelled_at_step is None and t.request.params.temperature == 0:
            alone = solo(lambda: fresh, t.request)
            got = t.events[-1]
            assert (got.text, got.reason) == (alone.text, alone.reason), (config, t.request.request_id)
